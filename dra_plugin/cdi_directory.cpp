// cdi_directory.h: the CDI directory made if missing and checked before any spec goes in it.
#include "dra_plugin/cdi_directory.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace cuslice::dra {

std::string prepare_cdi_dir(const std::string& dir) {
  std::error_code ec;
  const std::filesystem::path path(dir);
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  // 0755 whatever the umask, as /var/run/cdi is: the specs' own mode keeps them private.
  errno = 0;
  if (::mkdir(dir.c_str(), 0755) == 0) ::chmod(dir.c_str(), 0755);
  const int made = errno;
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return fmt::format("cannot make directory {}: {}", dir, std::strerror(made));
  if (!S_ISDIR(st.st_mode)) return fmt::format("--cdi-dir {} is not a directory", dir);
  if (st.st_uid != 0 && st.st_uid != ::geteuid())
    return fmt::format("--cdi-dir {} belongs to uid {}, who could replace the claims' specs; give a directory of "
                       "root's or of this driver's user",
                       dir, st.st_uid);
  if ((st.st_mode & 022) != 0)
    return fmt::format("--cdi-dir {} is writable by other users (mode {:04o}), who could replace the claims' "
                       "specs; make it 0755",
                       dir, st.st_mode & 07777);
  return "";
}

}  // namespace cuslice::dra
