// Reads the driver's per-process memory (NvmlReader) on a thread of its own, once a period,
// and tells the daemon's loop through an eventfd that a reading is ready. An NVML query can
// take milliseconds; on the daemon's thread it would delay every scheduling step behind it,
// and with it a higher-priority tenant's claim of the token. The loop takes the newest
// reading and does the cheap part (setting it against tenants and quotas) itself.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "scheduler/usage/nvml_reader.h"

namespace cuslice {

class DriverPoller {
 public:
  using Processes = std::vector<std::vector<DriverProcess>>;
  struct Reading {
    std::optional<Processes> processes;  // nullopt: the query failed
    std::string error;                   // why, when it failed
  };

  // Starts the thread; its first reading comes after one period.
  DriverPoller(std::unique_ptr<NvmlReader> reader, std::chrono::nanoseconds period);
  ~DriverPoller();  // stops and joins the thread
  DriverPoller(const DriverPoller&) = delete;
  DriverPoller& operator=(const DriverPoller&) = delete;

  // Readable (EFD_NONBLOCK) when a reading is ready; the loop watches it.
  int event_fd() const { return event_fd_; }

  // The newest reading not taken yet (older ones are dropped), nullopt when none is new.
  // Drains the eventfd.
  std::optional<Reading> take();

 private:
  void run(std::stop_token stop);

  std::unique_ptr<NvmlReader> reader_;
  std::chrono::nanoseconds period_;
  int event_fd_ = -1;
  std::mutex mutex_;  // guards latest_ (never held across a query)
  std::optional<Reading> latest_;
  std::condition_variable_any wake_;
  std::jthread thread_;  // last: started once the members above exist
};

}  // namespace cuslice
