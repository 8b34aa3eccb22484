// `cuslice run`'s flag checks (run_flags.h).
#include "cli/run_flags.h"

#include <fmt/format.h>

#include <string_view>

#include "config/size.h"
#include "config/tenant_config.h"

namespace cuslice::cli {
namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
}

}  // namespace

// The hook parses CUSLICE_MEMORY_LIMIT with the same function at startup, where it can only
// refuse CUDA; checking here turns a typo into a usage error before anything runs. On the
// command line a unit is required: `--memory 4` is 4 bytes to the hook, never what was meant.
std::string check_memory(std::string& text) {
  SizeSpec spec;
  const char* why = nullptr;
  if (!parse_size(text, spec, &why)) return fmt::format("\"{}\" is not a memory size: {}", text, why);
  if (spec.kind == SizeSpec::Kind::kBytes && spec.bytes == 0) return fmt::format("\"{}\": a quota must be above zero", text);
  return {};
}

std::string normalise_percent(std::string& text) {
  double percent = 0;
  const char* why = nullptr;
  if (!parse_percent(text, percent, &why)) return fmt::format("\"{}\" is not a percentage: {}", text, why);
  text = fmt::format("{}%", percent);
  return {};
}

double percent_value(const std::string& normalised) {
  double percent = 0;
  parse_percent(normalised, percent, nullptr);
  return percent;
}

// The configuration's rule, so that a name `run` accepts is one a file could hold too.
std::string check_tenant(std::string& name) {
  if (valid_tenant_name(name)) return {};
  return fmt::format("\"{}\" is not a tenant name: 1 to {} letters, digits, '-', '_' or '.'", name,
                     kMaxTenantNameLength);
}

// CUDA_VISIBLE_DEVICES: indices, GPU-<uuid> or MIG-<uuid> (a unique prefix is enough for
// CUDA), separated by commas. Anything else CUDA would ignore without a word, hiding GPUs.
std::string check_gpus(std::string& list) {
  constexpr const char* kForms = "write indices or UUIDs separated by commas, e.g. 0,1 or GPU-8f6b0c1e or MIG-5c4a...";
  if (list.empty()) return fmt::format("the GPU list is empty; {}", kForms);
  size_t start = 0;
  for (;;) {
    const size_t comma = list.find(',', start);
    const std::string_view item = std::string_view(list).substr(start, comma == std::string::npos ? comma : comma - start);
    if (item.empty()) return fmt::format("\"{}\" has an empty entry; {}", list, kForms);
    std::string_view id = item;
    if (id.starts_with("MIG-")) id.remove_prefix(4);
    if (id.starts_with("GPU-")) id.remove_prefix(4);  // GPU-<uuid>, and MIG-GPU-<uuid>/<gi>/<ci> of old drivers
    const bool uuid = id.size() < item.size() && !id.empty() &&
                      id.find_first_not_of("0123456789abcdefABCDEF-/") == std::string_view::npos;
    if (!all_digits(item) && !uuid)
      return item.size() == list.size() ? fmt::format("\"{}\" is not a GPU index or UUID; {}", item, kForms)
                                        : fmt::format("\"{}\" in \"{}\" is not a GPU index or UUID; {}", item, list, kForms);
    if (comma == std::string::npos) return {};
    start = comma + 1;
  }
}

}  // namespace cuslice::cli
