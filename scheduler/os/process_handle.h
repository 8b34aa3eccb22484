// A process known by more than its pid: a pidfd, which names one process for good, with the
// start time and cgroup /proc gave while that descriptor showed the process alive. Taken when
// a connection is accepted, so that a registration sent seconds later, or by a child that was
// handed the socket, is judged by the process that connected; used for every signal the
// daemon sends, so that a pid reused by another process is never hit. System calls only: no
// daemon state, no logging.
//
// pidfd_open and pidfd_send_signal go through syscall(): glibc wraps them only from 2.36 on,
// and the release is built for 2.31. Kernels from 5.3 have them.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace cuslice {

struct PeerProcess {
  int pidfd = -1;           // owned by the caller; readable (POLLIN) once the process exited
  uint64_t start_time = 0;  // process_info.h: field 22 of /proc/<pid>/stat
  std::string cgroup;       // cgroup v2 path, "" when none
};

// The process at the other end of the connected Unix socket `sock`, whose SO_PEERCRED pid is
// `pid`: SO_PEERPIDFD where the kernel has it (6.5 on: the process that connected, whatever
// happened since; none from such a kernel means that process was reaped), else
// pidfd_open(pid), kept only if that process started before the connection was accepted.
// nullopt when it has exited already (or /proc will not say).
std::optional<PeerProcess> identify_peer(int sock, pid_t pid);

// A pidfd of the process `pid` that started at `start_time` (0: any), or -1 when that
// process is gone (its pid free, or another's now).
int pidfd_of(pid_t pid, uint64_t start_time);

// Whether the pidfd's process is still running (its pidfd not readable yet).
bool pidfd_alive(int pidfd);

// Sends `sig` through the pidfd: 0, or the errno (ESRCH: it exited; EPERM: not ours to signal).
int pidfd_signal(int pidfd, int sig);

}  // namespace cuslice
