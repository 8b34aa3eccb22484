// The per-user runtime directory of runtime_dir.h: where it is, its fallback when someone
// else took its name, and whether it is safe.
#include "cli/runtime_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "cli/error.h"
#include "protocol/control_socket.h"

namespace cuslice::cli {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kFallbackSuffix = "-XXXXXX";  // mkdtemp's template
constexpr const char* kFallbackSocketDir = "run";

// $XDG_RUNTIME_DIR when it is an absolute directory of this user; a variable inherited
// across `su` or `sudo` names another user's directory and is passed over.
bool usable_xdg_runtime_dir(const char* value) {
  if (value == nullptr || value[0] != '/') return false;
  struct stat st {};
  return ::stat(value, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid();
}

// A real directory of the effective uid, closed to group and others (as lstat saw it).
bool private_to_us(const struct stat& st) {
  return S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() && (st.st_mode & 077) == 0;
}

// Whether `dir` can be used as it is, or made: absent, or private to us.
bool free_or_ours(const fs::path& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return errno == ENOENT;
  return private_to_us(st);
}

// The sibling where the control socket of a socket in `dir` goes (control_socket.h).
fs::path control_sibling(const fs::path& dir) {
  return fs::path(wire::default_control_socket((dir / "cuslice.sock").string())).parent_path();
}

// Whether `name` is one mkdtemp could have made from "<prefix>XXXXXX".
bool fallback_name(std::string_view name, std::string_view prefix) {
  const size_t random = kFallbackSuffix.size() - 1;
  if (name.size() != prefix.size() + random || name.substr(0, prefix.size()) != prefix) return false;
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(prefix.size()), name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; });
}

// The fallbacks of `dir` that exist: private to us, by name.
std::vector<fs::path> fallbacks_of(const fs::path& dir) {
  const std::string prefix = dir.filename().string() + "-";
  std::vector<fs::path> found;
  DIR* parent = ::opendir(dir.parent_path().c_str());
  if (parent == nullptr) return found;
  while (const dirent* e = ::readdir(parent)) {
    struct stat st {};
    if (fallback_name(e->d_name, prefix) && ::fstatat(::dirfd(parent), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        private_to_us(st))
      found.push_back(dir.parent_path() / e->d_name);
  }
  ::closedir(parent);
  std::sort(found.begin(), found.end());
  return found;
}

// The fallback of `dir`: the first that exists, else one made now.
fs::path fallback_of(const fs::path& dir) {
  std::vector<fs::path> found = fallbacks_of(dir);
  if (!found.empty()) return found.front();
  std::string made = dir.string() + std::string(kFallbackSuffix);
  if (::mkdtemp(made.data()) == nullptr)
    throw Error(ExitCode::kFailure,
                fmt::format("{} is not yours, and no private directory can be made beside it: {}", dir.string(),
                            std::strerror(errno)),
                "pass --socket PATH in a directory only you can write");
  // Two commands that each made one at once settle on the same: the first by name.
  found = fallbacks_of(dir);
  if (!found.empty() && found.front() != made) {
    ::rmdir(made.c_str());
    return found.front();
  }
  return made;
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
  // Taken between our look and now (the next run passes over it), or a path the user gave.
  const std::string fix = "run the command again, or pass --socket PATH in a directory only you can write";
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
                fix);
}

fs::path user_runtime_dir_path() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  return usable_xdg_runtime_dir(xdg) ? fs::path(xdg) / "cuslice" : fs::path(fmt::format("/tmp/cuslice-{}", ::geteuid()));
}

fs::path user_socket_dir() {
  const fs::path dir = user_runtime_dir_path();
  if (free_or_ours(dir) && free_or_ours(control_sibling(dir))) return dir;
  return fallback_of(dir) / kFallbackSocketDir;
}

}  // namespace cuslice::cli
