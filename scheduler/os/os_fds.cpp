// The daemon's kernel descriptors (os_fds.h): the listening sockets and timerfds.
#include "scheduler/os/os_fds.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

namespace cuslice {

using Nanos = std::chrono::nanoseconds;

void throw_errno(const std::string& what) { throw std::system_error(errno, std::generic_category(), what); }

namespace {

// The socket's directory exists, and nobody but its owner (us or root) can put another file
// in the socket's place; for the tenant socket, sticky directories (/tmp) let nobody remove
// another user's file. A directory created here gets `mode`.
void make_safe_directory(const std::filesystem::path& dir, SocketAccess access) {
  if (dir.empty()) return;
  const mode_t mode = access == SocketAccess::kOwner ? 0700 : 0755;
  if (mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) {
    std::filesystem::create_directories(dir);  // missing parents too; throws with the reason
    chmod(dir.c_str(), mode);
  }
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) throw_errno("stat " + dir.string());
  if (!S_ISDIR(st.st_mode)) throw std::runtime_error(dir.string() + " is not a directory");
  const bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
  const bool owner_ok = st.st_uid == geteuid() || st.st_uid == 0;
  const bool sticky_ok = access == SocketAccess::kEveryone && (st.st_mode & S_ISVTX);
  if (!owner_ok || (others_write && !sticky_ok)) {
    char mode_text[8];
    std::snprintf(mode_text, sizeof mode_text, "%04o", st.st_mode & 07777);
    throw std::runtime_error(dir.string() + " may be written by other users (owner uid " + std::to_string(st.st_uid) +
                             ", mode " + mode_text + "): they could replace the socket; use a directory only root or "
                             "this user can write to, e.g. " +
                             (access == SocketAccess::kOwner ? "/run/cuslice-control" : "/run/cuslice"));
  }
}

}  // namespace

pid_t lock_whole_file(int fd) {
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  if (fcntl(fd, F_SETLK, &lock) == 0) return 0;
  if (errno != EACCES && errno != EAGAIN) throw_errno("fcntl F_SETLK");
  struct flock holder {};
  holder.l_type = F_WRLCK;
  holder.l_whence = SEEK_SET;
  if (fcntl(fd, F_GETLK, &holder) != 0 || holder.l_type == F_UNLCK || holder.l_pid <= 0) return -1;
  return holder.l_pid;
}

pid_t write_lock_holder(int fd) {
  struct flock probe {};
  probe.l_type = F_WRLCK;
  probe.l_whence = SEEK_SET;
  if (fcntl(fd, F_GETLK, &probe) != 0) throw_errno("fcntl F_GETLK");
  if (probe.l_type != F_WRLCK) return 0;
  return probe.l_pid > 0 ? probe.l_pid : -1;
}

int lock_control_directory(const std::string& control_socket_path) {
  make_safe_directory(std::filesystem::path(control_socket_path).parent_path(), SocketAccess::kOwner);
  const std::string path = control_socket_path + ".scheduler.lock";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
  if (fd < 0) throw_errno("open " + path);
  // An older daemon made it 0644; nobody else may open it, or lock it.
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (st.st_uid != geteuid() && st.st_uid != 0) ||
      ((st.st_mode & 077) != 0 && fchmod(fd, 0600) != 0)) {
    close(fd);
    throw std::runtime_error(path + " is not a regular file of this user's that it can keep to itself: remove it");
  }
  const pid_t holder = lock_whole_file(fd);
  if (holder != 0) {
    close(fd);
    throw std::runtime_error("another scheduler" + (holder > 0 ? " (pid " + std::to_string(holder) + ")" : std::string()) +
                             " is already listening on " + control_socket_path + " (it holds " + path + ")");
  }
  return fd;
}

void refuse_if_answered(const std::string& socket_path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof addr.sun_path) throw std::runtime_error("socket path too long: " + socket_path);
  std::strcpy(addr.sun_path, socket_path.c_str());
  struct stat st {};
  if (lstat(socket_path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode) || (st.st_uid != geteuid() && st.st_uid != 0))
    return;
  // Non-blocking: a daemon whose backlog is full answers EAGAIN, and is alive.
  const int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (probe < 0) throw_errno("socket");
  const bool live = connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 || errno == EAGAIN;
  ucred peer{};
  socklen_t length = sizeof peer;
  const bool known = live && getsockopt(probe, SOL_SOCKET, SO_PEERCRED, &peer, &length) == 0 && peer.pid > 0;
  close(probe);
  if (live) {
    throw std::runtime_error("another scheduler" + (known ? " (pid " + std::to_string(peer.pid) + ")" : std::string()) +
                             " is already listening on " + socket_path);
  }
}

int listen_on(const std::string& path, SocketAccess access) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) throw std::runtime_error("socket path too long: " + path);
  std::strcpy(addr.sun_path, path.c_str());
  make_safe_directory(std::filesystem::path(path).parent_path(), access);
  unlink(path.c_str());

  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw_errno("socket");
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) throw_errno("bind " + path);
  // Tenant socket: any local user's process may register; tenants are decided from kernel
  // credentials. Control socket: the daemon's user and root. Set before listen(), so that
  // nobody connects while the file still has the umask's mode.
  if (chmod(path.c_str(), access == SocketAccess::kOwner ? 0600 : 0666) != 0) throw_errno("chmod " + path);
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
