#include "common/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

namespace cuslice {

namespace {

// Writes all of `content` to `fd`; 0, or the errno of the write that failed.
int write_all(int fd, std::string_view content) {
  for (size_t done = 0; done < content.size();) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno != EINTR) return errno;
    if (n > 0) done += static_cast<size_t>(n);
  }
  return 0;
}

// Fills the open temporary file `fd` and closes it; 0, or the errno of the step that failed.
int fill_and_close(int fd, std::string_view content, mode_t mode) {
  int err = write_all(fd, content);
  // mkstemp creates 0600; the caller says who else may read the file (a file mounted into
  // containers is read by their users).
  if (err == 0 && ::fchmod(fd, mode) != 0) err = errno;
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  return err;
}

}  // namespace

int write_file(const std::string& target, std::string_view content, mode_t mode) {
  std::string temp = target + ".tmpXXXXXX";
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) return errno;
  int err = fill_and_close(fd, content, mode);
  if (err == 0 && ::rename(temp.c_str(), target.c_str()) != 0) err = errno;
  if (err != 0) ::unlink(temp.c_str());
  return err;
}

bool read_file(const std::string& path, std::string& text) {
  std::ifstream in(path);
  if (!in) return false;
  text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

bool write_if_changed(const std::string& path, const std::string& text, std::string& why, mode_t mode) {
  std::string current;
  struct stat st {};
  const bool same = read_file(path, current) && current == text && ::stat(path.c_str(), &st) == 0;
  if (same && (st.st_mode & 07777 & ~mode) == 0) return true;  // no more open than asked
  if (const int err = write_file(path, text, mode); err != 0) {
    why = "cannot write " + path + ": " + std::strerror(err);
    return false;
  }
  return true;
}

}  // namespace cuslice
