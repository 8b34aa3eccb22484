// The per-user runtime directory of runtime_dir.h: where it is, and whether it is safe.
#include "cli/runtime_dir.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "cli/error.h"

namespace cuslice::cli {
namespace {

namespace fs = std::filesystem;

// $XDG_RUNTIME_DIR when it is an absolute directory of this user; a variable inherited
// across `su` or `sudo` names another user's directory and is passed over.
bool usable_xdg_runtime_dir(const char* value) {
  if (value == nullptr || value[0] != '/') return false;
  struct stat st {};
  return ::stat(value, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid();
}

}  // namespace

void ensure_private_dir(const fs::path& dir) {
  const std::string where = dir.string();
  if (::mkdir(where.c_str(), 0700) != 0 && errno != EEXIST)
    throw Error(ExitCode::kFailure, fmt::format("cannot create {}: {}", where, std::strerror(errno)),
                "pass --socket PATH in a directory you can write");
  struct stat st {};
  if (::lstat(where.c_str(), &st) != 0)
    throw Error(ExitCode::kFailure, fmt::format("cannot inspect {}: {}", where, std::strerror(errno)));
  const std::string fix = fmt::format("remove it (rm -r {}) and run again, or pass --socket PATH", where);
  if (S_ISLNK(st.st_mode))
    throw Error(ExitCode::kFailure, fmt::format("{} is a symbolic link, not a directory of yours", where), fix);
  if (!S_ISDIR(st.st_mode)) throw Error(ExitCode::kFailure, fmt::format("{} is not a directory", where), fix);
  if (st.st_uid != ::geteuid())
    throw Error(ExitCode::kFailure,
                fmt::format("{} belongs to uid {}, not to you (uid {}): it cannot hold your scheduler", where,
                            st.st_uid, ::geteuid()),
                fix);
  if ((st.st_mode & 077) != 0)
    throw Error(ExitCode::kFailure,
                fmt::format("{} is open to other users (mode {:04o}): it cannot hold your scheduler", where,
                            st.st_mode & 07777),
                fmt::format("chmod 700 {}", where));
}

fs::path user_runtime_dir_path() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  return usable_xdg_runtime_dir(xdg) ? fs::path(xdg) / "cuslice" : fs::path(fmt::format("/tmp/cuslice-{}", ::geteuid()));
}

}  // namespace cuslice::cli
