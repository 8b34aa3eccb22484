// DriverPoller: the NVML thread. Blocks every signal (the daemon takes them on its signalfd)
// and never touches the daemon's state: it only hands readings over.
#include "scheduler/usage/driver_poller.h"

#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace cuslice {

DriverPoller::DriverPoller(std::unique_ptr<NvmlReader> reader, std::chrono::nanoseconds period)
    : reader_(std::move(reader)), period_(period) {
  event_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (event_fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  // The thread inherits the signal mask of the thread that creates it: block all first.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  thread_ = std::jthread([this](std::stop_token stop) { run(stop); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

DriverPoller::~DriverPoller() {
  thread_.request_stop();  // wakes wake_.wait_for
  if (thread_.joinable()) thread_.join();
  close(event_fd_);
}

void DriverPoller::run(std::stop_token stop) {
  pthread_setname_np(pthread_self(), "cuslice-nvml");
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (wake_.wait_for(lock, stop, period_, [&stop] { return stop.stop_requested(); })) return;
    }
    Reading r;
    r.processes = reader_->processes(&r.error);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      latest_ = std::move(r);
    }
    const uint64_t one = 1;
    (void)!write(event_fd_, &one, sizeof one);
  }
}

std::optional<DriverPoller::Reading> DriverPoller::take() {
  uint64_t count;
  (void)!read(event_fd_, &count, sizeof count);
  std::lock_guard<std::mutex> lock(mutex_);
  std::optional<Reading> r = std::move(latest_);
  latest_.reset();
  return r;
}

}  // namespace cuslice
