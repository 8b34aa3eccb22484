// Pidfds and the facts read while they show their process alive (process_handle.h).
#include "scheduler/os/process_handle.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "scheduler/os/process_info.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5, asm-generic/socket.h
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

namespace cuslice {

namespace {

int open_pidfd(pid_t pid) { return pid > 0 ? static_cast<int>(syscall(SYS_pidfd_open, pid, 0)) : -1; }

// Clock ticks since boot now, as /proc/<pid>/stat counts a start time.
uint64_t ticks_since_boot() {
  timespec t{};
  clock_gettime(CLOCK_BOOTTIME, &t);
  const auto hz = static_cast<uint64_t>(sysconf(_SC_CLK_TCK));
  return static_cast<uint64_t>(t.tv_sec) * hz + static_cast<uint64_t>(t.tv_nsec) * hz / 1'000'000'000;
}

// Whether this kernel gives a peer's pidfd (SO_PEERPIDFD, Linux 6.5), asked once of a socket
// pair of our own, whose peer (this process) is alive. Where it does, a connection it gives
// none for is one whose process was already reaped (Linux 6.5 to 6.17 then fail; 6.18 gives
// a pidfd of the dead process): its pid may be another process's by now.
bool kernel_gives_peer_pidfds() {
  static std::atomic<int> known{-1};
  if (const int k = known.load(std::memory_order_relaxed); k >= 0) return k == 1;
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) return false;  // ask again later
  int fd = -1;
  socklen_t length = sizeof fd;
  const bool gives = getsockopt(pair[0], SOL_SOCKET, SO_PEERPIDFD, &fd, &length) == 0 && fd >= 0;
  if (fd >= 0) close(fd);
  close(pair[0]);
  close(pair[1]);
  known.store(gives ? 1 : 0, std::memory_order_relaxed);
  return gives;
}

}  // namespace

bool pidfd_alive(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return pidfd >= 0 && poll(&p, 1, 0) == 0;
}

int pidfd_signal(int pidfd, int sig) {
  return syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0) == 0 ? 0 : errno;
}

std::optional<PeerProcess> identify_peer(int sock, pid_t pid) {
  PeerProcess p;
  socklen_t length = sizeof p.pidfd;
  const bool exact = getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &p.pidfd, &length) == 0 && p.pidfd >= 0;
  if (!exact) {
    if (kernel_gives_peer_pidfds()) return std::nullopt;  // the process that connected is gone
    p.pidfd = open_pidfd(pid);
  }
  if (p.pidfd < 0) return std::nullopt;
  const uint64_t accepted = ticks_since_boot();
  const std::optional<uint64_t> start = process_start_time(pid);
  p.cgroup = process_cgroup(pid);
  // Read while the pidfd's process ran: /proc/<pid> was that process (a live pid is nobody
  // else's). Without SO_PEERPIDFD the pid may have been reused between connect() and
  // pidfd_open(); a process that started after the accept cannot be the one that connected.
  if (!start || !pidfd_alive(p.pidfd) || (!exact && *start > accepted)) {
    close(p.pidfd);
    return std::nullopt;
  }
  p.start_time = *start;
  return p;
}

int pidfd_of(pid_t pid, uint64_t start_time) {
  const int fd = open_pidfd(pid);
  if (fd < 0) return -1;
  const std::optional<uint64_t> start = process_start_time(pid);
  if (!start || (start_time != 0 && *start != start_time) || !pidfd_alive(fd)) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace cuslice
