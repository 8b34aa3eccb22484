// Finds libcuslice.so, the interposer that `cuslice run` preloads and `cuslice cdi generate`
// mounts into containers.
//
// Looks, in order, at:
//   1. the path given on the command line (`explicit_path`, from --hook or --hook-path);
//   2. $CUSLICE_HOOK_PATH (`env_path`);
//   3. <dir of the executable>/../lib/libcuslice.so   (installed: bin/cuslice, lib/...);
//   4. <dir of the executable>/../hook/libcuslice.so  (build tree: cli/cuslice, hook/...).
// A path the user named (1 or 2) that is not a readable regular file is an error, not a reason
// to keep looking: silently preloading some other copy would run the wrong quota code.
// The result is absolute, because the preloaded process and its children may change
// directory, and LD_PRELOAD is read again by every exec below them.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace cuslice::cli {

inline constexpr const char* kHookFileName = "libcuslice.so";
inline constexpr const char* kHookPathEnv = "CUSLICE_HOOK_PATH";

struct HookSearch {
  std::optional<std::filesystem::path> explicit_path;
  std::string explicit_flag;  // how the user gives (1), for messages: "--hook"
  std::optional<std::filesystem::path> env_path;
  std::filesystem::path executable;  // this program, symlinks resolved
};

// Returns the library's absolute path; throws Error (ExitCode::kFailure) if there is none.
std::filesystem::path locate_hook(const HookSearch& search);

// The running executable, from /proc/self/exe (so a symlink such as /usr/bin/cuslice leads to
// the real installation). Throws Error if /proc is not mounted.
std::filesystem::path current_executable();

// HookSearch filled from the environment and /proc for the given flag.
HookSearch hook_search_from_environment(std::optional<std::filesystem::path> explicit_path,
                                        std::string explicit_flag);

}  // namespace cuslice::cli
