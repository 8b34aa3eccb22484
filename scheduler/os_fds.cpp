// The daemon's kernel descriptors (os_fds.h): the listening socket and timerfds.
#include "os_fds.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

namespace cuslice {

using Nanos = std::chrono::nanoseconds;

void throw_errno(const std::string& what) { throw std::system_error(errno, std::generic_category(), what); }

int listen_on(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) throw std::runtime_error("socket path too long: " + path);
  std::strcpy(addr.sun_path, path.c_str());

  const int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  const bool live = probe >= 0 && connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  if (probe >= 0) close(probe);
  if (live) throw std::runtime_error("another scheduler is already listening on " + path);
  unlink(path.c_str());
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);

  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw_errno("socket");
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) throw_errno("bind " + path);
  // Any local user's process may register; tenants are decided from kernel credentials.
  chmod(path.c_str(), 0666);
  if (listen(fd, 128) != 0) throw_errno("listen " + path);
  return fd;
}

int make_timer() {
  const int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (fd < 0) throw_errno("timerfd_create");
  return fd;
}

namespace {

timespec to_timespec(Nanos t) {
  timespec ts{};
  ts.tv_sec = t.count() / 1'000'000'000;
  ts.tv_nsec = t.count() % 1'000'000'000;
  return ts;
}

}  // namespace

void set_timer(int fd, Nanos first, Nanos interval) {
  itimerspec spec{};
  spec.it_value = to_timespec(first);
  spec.it_interval = to_timespec(interval);
  timerfd_settime(fd, 0, &spec, nullptr);
}

void set_timer_at(int fd, Nanos at) {
  itimerspec spec{};
  spec.it_value = to_timespec(at);
  timerfd_settime(fd, TFD_TIMER_ABSTIME, &spec, nullptr);
}

void drain_timer(int fd) {
  uint64_t expirations;
  while (read(fd, &expirations, sizeof expirations) > 0) {
  }
}

Nanos seconds(double s) { return Nanos(static_cast<int64_t>(std::llround(s * 1e9))); }

}  // namespace cuslice
