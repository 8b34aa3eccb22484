#include "atomic_write.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "error.h"

namespace cuslice::cli {
namespace {

[[noreturn]] void fail(const std::filesystem::path& target, int err) {
  std::string hint;
  if (err == EACCES || err == EPERM || err == EROFS)
    hint = "write somewhere you may, or run with the privileges that directory needs";
  else if (err == ENOENT)
    hint = "create the directory first";
  throw Error(ExitCode::kFailure, "cannot write " + target.string() + ": " + std::strerror(err),
              hint);
}

}  // namespace

void write_file_atomically(const std::filesystem::path& target, std::string_view content) {
  std::string temp = target.string() + ".tmpXXXXXX";
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) fail(target, errno);

  int err = 0;
  for (size_t done = 0; err == 0 && done < content.size();) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno != EINTR) err = errno;
    if (n > 0) done += static_cast<size_t>(n);
  }
  // mkstemp creates 0600; a CDI spec is read by the container runtime, whatever its user.
  if (err == 0 && ::fchmod(fd, 0644) != 0) err = errno;
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(temp.c_str(), target.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(temp.c_str());
    fail(target, err);
  }
}

}  // namespace cuslice::cli
