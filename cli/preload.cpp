#include "cli/preload.h"

#include "cli/error.h"
#include "cli/hook_locator.h"

namespace cuslice::cli {
namespace {

constexpr std::string_view kSeparators = " :";

}  // namespace

bool preload_has_hook(std::string_view preload) {
  while (!preload.empty()) {
    const size_t end = preload.find_first_of(kSeparators);
    const std::string_view entry = preload.substr(0, end);
    const size_t slash = entry.rfind('/');
    const std::string_view name = slash == std::string_view::npos ? entry : entry.substr(slash + 1);
    if (name == kHookFileName) return true;
    if (end == std::string_view::npos) break;
    preload.remove_prefix(end + 1);
  }
  return false;
}

std::string append_hook_to_preload(std::string_view current, const std::filesystem::path& hook) {
  const std::string hook_text = hook.string();
  if (hook_text.find_first_of(kSeparators) != std::string::npos)
    throw Error(
        ExitCode::kFailure,
        "cannot preload " + hook_text + ": LD_PRELOAD cannot hold a path with a space or a colon",
        "install libcuslice.so under a path without spaces or colons");
  if (preload_has_hook(current)) return std::string(current);

  std::string result(current);
  if (!result.empty() && kSeparators.find(result.back()) == std::string_view::npos) result += ':';
  result += hook_text;
  return result;
}

}  // namespace cuslice::cli
