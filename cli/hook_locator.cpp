#include "cli/hook_locator.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <vector>

#include "cli/error.h"

namespace cuslice::cli {
namespace fs = std::filesystem;
namespace {

// Why `path` cannot be preloaded, or an empty string if it can.
std::string unusable_reason(const fs::path& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec) return ec.message();
  if (!fs::exists(status)) return "No such file or directory";
  if (!fs::is_regular_file(status)) return "not a regular file";
  if (::access(path.c_str(), R_OK) != 0) return std::strerror(errno);
  return {};
}

fs::path absolute_normal(const fs::path& path) {
  std::error_code ec;
  fs::path result = fs::absolute(path, ec);
  if (ec) result = path;
  return result.lexically_normal();
}

fs::path require_named(const fs::path& path, const std::string& source) {
  const fs::path absolute = absolute_normal(path);
  const std::string why = unusable_reason(absolute);
  if (!why.empty())
    throw Error(ExitCode::kFailure,
                "cannot use hook library " + absolute.string() + " (from " + source + "): " + why,
                "point " + source + " at an existing libcuslice.so");
  return absolute;
}

}  // namespace

fs::path locate_hook(const HookSearch& search) {
  if (search.explicit_path) return require_named(*search.explicit_path, search.explicit_flag);
  if (search.env_path) return require_named(*search.env_path, std::string("$") + kHookPathEnv);

  const fs::path bin_dir = search.executable.parent_path();
  const std::vector<fs::path> candidates = {
      bin_dir / ".." / "lib" / kHookFileName,
      bin_dir / ".." / "hook" / kHookFileName,
  };
  std::string looked;
  for (const fs::path& candidate : candidates) {
    const fs::path absolute = absolute_normal(candidate);
    if (unusable_reason(absolute).empty()) return absolute;
    looked += (looked.empty() ? "" : ", ") + absolute.string();
  }
  throw Error(ExitCode::kFailure,
              std::string("cannot find ") + kHookFileName + " (looked at " + looked + ")",
              "pass " + search.explicit_flag + " PATH or set " + kHookPathEnv +
                  " to the library's location");
}

fs::path current_executable() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec)
    throw Error(ExitCode::kFailure,
                "cannot find this program's location: /proc/self/exe: " + ec.message(),
                "mount /proc, or pass the hook library's path explicitly");
  return self;
}

HookSearch hook_search_from_environment(std::optional<fs::path> explicit_path,
                                        std::string explicit_flag) {
  HookSearch search;
  search.explicit_path = std::move(explicit_path);
  search.explicit_flag = std::move(explicit_flag);
  if (const char* env = std::getenv(kHookPathEnv); env != nullptr && *env != '\0')
    search.env_path = env;
  // /proc/self/exe is only needed when nothing was named; a chroot without /proc can still
  // use --hook or $CUSLICE_HOOK_PATH.
  if (!search.explicit_path && !search.env_path) search.executable = current_executable();
  return search;
}

}  // namespace cuslice::cli
