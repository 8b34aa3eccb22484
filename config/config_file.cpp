// Reading a configuration file (load_config_file, tenant_config.h): refuses, by name, what
// is not a regular file of at most kMaxConfigFileBytes before it reads a byte of it, then
// hands the text to parse_config(). A reload runs on the scheduler's thread, so nothing here
// may block on a FIFO or a device, or take long over a large file.
//
// Never parses: the text goes to config_parser.cpp as it is.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "config/tenant_config.h"

namespace cuslice {

ConfigResult load_config_file(const std::string& path) {
  const auto refuse = [&](std::string message) {
    ConfigResult result;
    result.errors.push_back({path, 0, 0, std::move(message)});
    return result;
  };
  // O_NONBLOCK: a FIFO put in the file's place must not block the daemon in open().
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return refuse(std::string("cannot read the file: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0) return refuse(std::string("cannot read the file: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return refuse("is a directory, not a configuration file");
  if (!S_ISREG(st.st_mode)) return refuse("is not a regular file (a device, FIFO or socket)");
  if (static_cast<uint64_t>(st.st_size) > kMaxConfigFileBytes) {
    return refuse("is " + std::to_string(st.st_size) + " bytes, more than a configuration may have (" +
                  std::to_string(kMaxConfigFileBytes) + ")");
  }
  // Read one byte past the limit: the file may have grown since fstat.
  std::string text(kMaxConfigFileBytes + 1, '\0');
  size_t have = 0;
  while (have < text.size()) {
    const ssize_t n = read(fd, text.data() + have, text.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return refuse(std::string("cannot read the file: ") + std::strerror(errno));
    if (n == 0) break;
    have += static_cast<size_t>(n);
  }
  if (have > kMaxConfigFileBytes) {
    return refuse("is more than " + std::to_string(kMaxConfigFileBytes) + " bytes, more than a configuration may have");
  }
  if (have == 0) return refuse("the file is empty: expected `scheduler:` and `tenants:`");
  text.resize(have);
  return parse_config(text, path);
}

}  // namespace cuslice
