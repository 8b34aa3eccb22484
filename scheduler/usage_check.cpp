// The daemon's side of the usage watchdog: once a second it takes the driver's per-process
// memory (read off the daemon's thread by DriverPoller), sets it against the registered processes and the tenants' quotas
// (UsageWatchdog), publishes the findings in the segment for `cuslice status` and the metrics,
// logs each violation once when it begins, and kills under `on_violation: kill`. Calls
// driver_poller.h, usage_watchdog.h and segment_snapshot.h.
#include <signal.h>
#include <sys/epoll.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

#include "daemon.h"
#include "os_fds.h"
#include "segment_snapshot.h"

namespace cuslice {

void Daemon::start_usage_watchdog() {
  auto nvml = std::make_unique<NvmlReader>();
  if (!nvml->unavailable().empty()) {
    spdlog::info("usage watchdog off: {}", nvml->unavailable());
    return;
  }
  driver_poller_ = std::make_unique<DriverPoller>(std::move(nvml), kUsageCheckPeriod);
  usage_fd_ = driver_poller_->event_fd();
  add_to_epoll(usage_fd_, EPOLLIN);
  spdlog::info("usage watchdog on: checking the driver's per-process memory every {} ms",
               kUsageCheckPeriod.count() / 1'000'000);
}

void Daemon::check_usage() {
  std::optional<DriverPoller::Reading> reading = driver_poller_->take();
  if (!reading) return;
  const auto& driver = reading->processes;
  if (!driver) {
    if (!usage_error_logged_) spdlog::warn("usage watchdog: {}", reading->error);
    usage_error_logged_ = true;
    return;
  }
  usage_error_logged_ = false;

  std::vector<RegisteredProcess> registered;
  for (const auto& [fd, client] : clients_) {
    const shm::TenantRegion* region = regions_.get(client.tenant);
    if (client.kind != ClientKind::kHook || client.slot < 0 || region == nullptr) continue;
    // The tenant is the daemon's own record; the charged bytes are what the process says
    // (in its tenant's region), which only decides which of that tenant's processes is named.
    RegisteredProcess p{client.pid, client.tenant, {}};
    const shm::ProcessUse& use = region->processes[client.slot];
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) p.charged.push_back(use.charged[g].load(std::memory_order_relaxed));
    registered.push_back(std::move(p));
  }
  const SegmentSnapshot snap = take_snapshot(*segment_);
  std::vector<WatchedTenant> tenants(shm::kMaxTenants);
  for (const TenantSnapshot& t : snap.tenants) {
    WatchedTenant& w = tenants[t.index];
    w.name = t.name;
    w.quota.assign(shm::kMaxGpus, std::nullopt);
    for (const TenantGpuSnapshot& use : t.gpus) w.quota[snap.gpus[use.gpu].index] = use.memory_quota;
    // A quota in bytes holds on every GPU; one in percent only where a hook reported the card
    // (the snapshot resolved it), which every GPU a registered process uses is.
    if (t.memory_quota_bytes) w.quota.assign(shm::kMaxGpus, t.memory_quota_bytes);
    const int c = config_.find_tenant(t.name);
    w.kill_on_violation = c >= 0 && config_.tenants[static_cast<size_t>(c)].kill_on_violation;
  }

  const std::vector<Violation> found = usage_watchdog_.check(*driver, registered, tenants);
  std::array<uint32_t, shm::kMaxGpus> unhooked{};
  std::array<uint64_t, shm::kMaxGpus> unhooked_bytes{};
  std::array<std::array<uint64_t, shm::kMaxGpus>, shm::kMaxTenants> over{};
  for (const Violation& v : found) {
    if (v.gpu >= shm::kMaxGpus) continue;
    if (v.kind == Violation::Kind::kUnhooked) {
      unhooked[v.gpu] += 1;
      unhooked_bytes[v.gpu] += v.used_bytes;
      if (v.is_new)
        spdlog::warn("usage watchdog: pid {} holds {} bytes on GPU {} and is in no tenant (it runs without the hook)",
                     v.pid, v.used_bytes, v.gpu);
      continue;
    }
    const uint32_t t = *v.tenant;
    over[t][v.gpu] = v.used_bytes - v.quota_bytes;
    if (v.is_new)
      spdlog::warn("usage watchdog: tenant {} holds {} bytes on GPU {} by the driver's count, over its quota and "
                   "allowance of {} bytes (pid {} holds the most beyond what its hook charged)",
                   tenants[t].name, v.used_bytes, v.gpu, v.quota_bytes, v.pid);
    if (v.kill) {
      if (kill(v.pid, SIGKILL) == 0) {
        spdlog::warn("usage watchdog: killed pid {} of tenant {} (on_violation: kill)", v.pid, tenants[t].name);
        segment_->tenants[t].gpu[v.gpu].watchdog_kills.fetch_add(1, std::memory_order_relaxed);
      } else if (v.is_new) {
        // Typically EPERM: the daemon lacks CAP_KILL for another user's process.
        spdlog::error("usage watchdog: cannot kill pid {} of tenant {}: {} (the scheduler needs CAP_KILL to end "
                      "other users' processes; docs/operations.md)",
                      v.pid, tenants[t].name, std::strerror(errno));
      }
    }
  }
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    segment_->gpus[g].unhooked_processes.store(unhooked[g], std::memory_order_relaxed);
    segment_->gpus[g].unhooked_bytes.store(unhooked_bytes[g], std::memory_order_relaxed);
    for (uint32_t t = 0; t < shm::kMaxTenants; ++t)
      segment_->tenants[t].gpu[g].over_quota_bytes.store(over[t][g], std::memory_order_relaxed);
  }
}

}  // namespace cuslice
