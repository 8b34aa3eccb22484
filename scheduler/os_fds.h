// The descriptors the daemon gets from the kernel: its listening Unix socket and its
// timerfds (on CLOCK_MONOTONIC, the clock of clock.h). System calls only: no daemon state,
// no logging. Failures that leave the daemon unable to serve throw std::system_error.
#pragma once

#include <chrono>
#include <string>

namespace cuslice {

[[noreturn]] void throw_errno(const std::string& what);

// A listening SOCK_SEQPACKET socket at `path` that every local user may connect to. Refuses
// to start beside a live daemon; removes the socket file a dead one left behind.
int listen_on(const std::string& path);

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
