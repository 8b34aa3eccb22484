// The descriptors the daemon gets from the kernel: its listening Unix sockets (tenant and
// control) and its timerfds (on CLOCK_MONOTONIC, the clock of clock.h). System calls only: no
// daemon state, no logging. Failures that leave the daemon unable to serve throw
// std::system_error.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

namespace cuslice {

[[noreturn]] void throw_errno(const std::string& what);

// One daemon per socket and per segment, with POSIX record locks (fcntl F_SETLK): the kernel
// drops them when the holder dies, however it dies, so a restart after SIGKILL never finds
// a stale lock. pre: nothing else in the process opens the locked file (closing any of the
// process's descriptors of a file drops its record locks on it).
//
// A write lock on the whole of fd's file: 0 when taken, else the pid that holds it (as this
// process's pid namespace sees it; -1 when the kernel does not say).
pid_t lock_whole_file(int fd);
// Who holds a write lock on fd's file: 0 when nobody, else as lock_whole_file. Needs no
// write access to the file.
pid_t file_lock_holder(int fd);
// Who may connect to a socket the daemon listens on.
enum class SocketAccess {
  // The tenant socket: every local user (mode 0666). Its directory is created 0755 when
  // missing and must be one that other users cannot write to (else they could replace the
  // socket), unless it is sticky like /tmp.
  kEveryone,
  // The control socket: the daemon's user (and root) only (mode 0600). Its directory is
  // created 0700 when missing and must be one nobody but its owner (the daemon's user or
  // root) can write to, sticky or not.
  kOwner,
};

// Locks `<socket_path>.scheduler.lock` (created 0644 beside the socket; its directory is created and
// checked as listen_on does) and returns its descriptor, to keep open for the daemon's
// life. Throws, naming the holder's pid, when another daemon holds it or (a daemon of an
// older version, without locks) answers on the socket.
int lock_socket_path(const std::string& socket_path, SocketAccess access);

// A listening SOCK_SEQPACKET socket at `path`, open to whom `access` says; removes the
// socket file a dead daemon left behind (the caller holds lock_socket_path).
int listen_on(const std::string& path, SocketAccess access);

// A non-blocking CLOCK_MONOTONIC timerfd, disarmed.
int make_timer();
// Fires after `first`, then every `interval` (0: once). first == 0 disarms.
void set_timer(int fd, std::chrono::nanoseconds first, std::chrono::nanoseconds interval);
// Fires once at the absolute CLOCK_MONOTONIC time `at`; at == 0 disarms.
void set_timer_at(int fd, std::chrono::nanoseconds at);
// Reads every expiration, so that epoll stops reporting the timer.
void drain_timer(int fd);

// Seconds as written in options, rounded to the nanosecond.
std::chrono::nanoseconds seconds(double s);

}  // namespace cuslice
