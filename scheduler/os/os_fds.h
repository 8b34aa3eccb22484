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

// One daemon per control directory, with a POSIX record lock (fcntl F_SETLK) on a file in it
// that only the daemon's user can open: the kernel drops the lock when the holder dies,
// however it dies, so a restart after SIGKILL never finds a stale lock, and no other user can
// hold or queue for a lock on that file. pre: nothing else in the process opens the locked
// file (closing any of the process's descriptors of a file drops its record locks on it).
//
// A write lock on the whole of fd's file: 0 when taken, else the pid that holds it (as this
// process's pid namespace sees it; -1 when the kernel does not say).
pid_t lock_whole_file(int fd);
// Who holds a write lock on fd's file: 0 when nobody, else as lock_whole_file. Read locks
// are not reported: any reader of the file may take one, so they say nothing about a daemon
// (and no write lock can be held beside one).
pid_t write_lock_holder(int fd);
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

// Locks `<control_socket_path>.scheduler.lock` (mode 0600, in the control socket's
// directory, created and checked as listen_on does for SocketAccess::kOwner) and returns its
// descriptor, to keep open for the daemon's life. Throws, naming the holder's pid, when
// another daemon holds it.
int lock_control_directory(const std::string& control_socket_path);
// Throws, naming its pid where the kernel says, when a daemon answers on `socket_path`: one
// with another control directory, or of an older version. Only a socket file owned by this
// user or root is tried (no other user can bind one where a daemon's socket is; in a sticky
// directory another user's file is no daemon's), and the answer comes from the kernel: a
// socket nobody listens on refuses the connection.
void refuse_if_answered(const std::string& socket_path);

// A listening SOCK_SEQPACKET socket at `path`, open to whom `access` says; removes the
// socket file a dead daemon left behind (the caller holds lock_control_directory and found
// nobody answering on `path`).
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
