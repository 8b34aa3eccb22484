// The daemon's side of the usage watchdog: once a second it takes the driver's per-process
// memory (read off the daemon's thread by DriverPoller), sets it against the registered
// processes and the tenants' quotas (UsageWatchdog), publishes the findings in the segment
// for `cuslice status` and the metrics, logs each violation once when it begins, and kills
// under `on_violation: kill`. NVML's pids are matched to registered processes by pid and start
// time, and a kill goes through a pidfd checked against both.
//
// The size of each card is the daemon's own (NVML's, read once at start), published in the
// segment and handed to the daemon: a tenant's report of it never decides anything.
//
// Owns the poller, the card sizes and the watchdog's memory of what it reported. Reads the
// registered processes, the tenant regions and the configuration; writes only the segment's
// card sizes and unhooked/over-quota figures. Never touches the sockets, the token or preemption.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <unordered_map>

#include "scheduler/segment/process_table.h"
#include "scheduler/segment/shared_segment.h"
#include "scheduler/segment/tenant_regions.h"
#include "scheduler/tenants/tenant_table.h"
#include "scheduler/usage/driver_poller.h"
#include "scheduler/usage/usage_watchdog.h"

namespace cuslice {

class UsageCheck {
 public:
  static constexpr std::chrono::nanoseconds kPeriod = std::chrono::seconds(1);

  UsageCheck(SharedSegment& segment, TenantRegions& regions, const ProcessTable& processes, const TenantTable& tenants);

  // Starts reading the driver when NVML can be loaded: the descriptor that is readable when a
  // reading waits (on_reading()), or -1 when the watchdog is off (logged).
  int start();
  // Takes the newest reading and acts on it.
  void on_reading();
  // The MPS control daemon of the spatial GPUs (0: none): the MPS servers it starts hold
  // memory for their clients and are in no tenant, and are not reported.
  void set_mps_control(pid_t pid) { mps_control_ = pid; }
  // Each card's memory as NVML said at start(); 0 where unknown (no NVML).
  const std::array<uint64_t, shm::kMaxGpus>& card_sizes() const { return card_; }

 private:
  // The tenants as the watchdog needs them: names, quotas per GPU, kill or not.
  std::vector<WatchedTenant> watched_tenants() const;
  void publish(const std::vector<Violation>& found, const std::vector<WatchedTenant>& tenants);

  SharedSegment& segment_;
  TenantRegions& regions_;
  const ProcessTable& processes_;
  const TenantTable& tenants_;
  std::array<uint64_t, shm::kMaxGpus> card_{};
  std::unique_ptr<DriverPoller> poller_;
  UsageWatchdog watchdog_;
  std::unordered_map<pid_t, uint64_t> started_;  // the last reading's registered processes' start times
  bool error_logged_ = false;
  pid_t mps_control_ = 0;
};

}  // namespace cuslice
