// UsageCheck (usage_check.h): a reading set against the tenants, the violations logged,
// acted on and published.
#include "scheduler/usage/usage_check.h"

#include <signal.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <unordered_set>

#include "common/segment_snapshot.h"
#include "protocol/ppm.h"
#include "scheduler/os/process_handle.h"
#include "scheduler/os/process_info.h"

namespace cuslice {

UsageCheck::UsageCheck(SharedSegment& segment, TenantRegions& regions, const ProcessTable& processes,
                       const TenantTable& tenants)
    : segment_(segment), regions_(regions), processes_(processes), tenants_(tenants) {}

int UsageCheck::start() {
  auto nvml = std::make_unique<NvmlReader>();
  if (!nvml->unavailable().empty()) {
    spdlog::info("usage watchdog off: {}", nvml->unavailable());
    return -1;
  }
  const std::vector<uint64_t> totals = nvml->memory_totals();
  for (size_t g = 0; g < totals.size() && g < card_.size(); ++g) {
    card_[g] = totals[g];
    if (totals[g] != 0) segment_->gpus[g].memory_total.store(totals[g], std::memory_order_relaxed);
  }
  poller_ = std::make_unique<DriverPoller>(std::move(nvml), kPeriod);
  spdlog::info("usage watchdog on: checking the driver's per-process memory every {} ms", kPeriod.count() / 1'000'000);
  return poller_->event_fd();
}

std::vector<WatchedTenant> UsageCheck::watched_tenants() const {
  const SegmentSnapshot snap = take_snapshot(*segment_);
  const Config& config = tenants_.config();
  std::vector<WatchedTenant> tenants(shm::kMaxTenants);
  for (const TenantSnapshot& t : snap.tenants) {
    WatchedTenant& w = tenants[t.index];
    w.name = t.name;
    w.quota.assign(shm::kMaxGpus, std::nullopt);
    // A quota in bytes holds on every GPU; one in percent where the daemon knows the card
    // itself (NVML), never against the size a tenant's hook reported.
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
      if (t.memory_quota_bytes) w.quota[g] = t.memory_quota_bytes;
      else if (t.memory_quota_ppm && card_[g] != 0) w.quota[g] = ppm_of_bytes(card_[g], *t.memory_quota_ppm);
    }
    const int c = config.find_tenant(t.name);
    w.kill_on_violation = c >= 0 && config.tenants[static_cast<size_t>(c)].kill_on_violation;
  }
  return tenants;
}

void UsageCheck::on_reading() {
  std::optional<DriverPoller::Reading> reading = poller_ ? poller_->take() : std::nullopt;
  if (!reading) return;
  auto& driver = reading->processes;
  if (!driver) {
    if (!error_logged_) spdlog::warn("usage watchdog: {}", reading->error);
    error_logged_ = true;
    return;
  }
  error_logged_ = false;
  if (mps_control_ > 0)
    for (auto& gpu : *driver)
      std::erase_if(gpu, [this](const DriverProcess& p) { return process_parent(p.pid) == mps_control_; });

  // NVML names processes by pid alone: one is a registered process only if it is the very
  // process that registered (its start time too), never a later one that got its pid.
  std::unordered_set<pid_t> on_gpus;
  for (const auto& gpu : *driver)
    for (const DriverProcess& p : gpu) on_gpus.insert(p.pid);
  std::vector<RegisteredProcess> registered;
  started_.clear();
  for (const ProcessRecord& rec : processes_.all()) {
    const shm::TenantRegion* region = regions_.get(rec.tenant);
    if (region == nullptr) continue;
    if (on_gpus.count(rec.pid) && process_start_time(rec.pid) != rec.start_time) continue;
    started_[rec.pid] = rec.start_time;
    // The tenant is the daemon's own record; the charged bytes are what the process says
    // (in its tenant's region), which only decides which of that tenant's processes is named.
    RegisteredProcess p{rec.pid, rec.tenant, {}};
    const shm::ProcessUse& use = region->processes[rec.slot];
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) p.charged.push_back(use.charged[g].load(std::memory_order_relaxed));
    registered.push_back(std::move(p));
  }
  const std::vector<WatchedTenant> tenants = watched_tenants();
  publish(watchdog_.check(*driver, registered, tenants), tenants);
}

void UsageCheck::publish(const std::vector<Violation>& found, const std::vector<WatchedTenant>& tenants) {
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
    if (!v.kill) continue;
    // Through a pidfd of the process that registered: a pid reused since is never hit.
    const auto started = started_.find(v.pid);
    const int pidfd = started == started_.end() ? -1 : pidfd_of(v.pid, started->second);
    if (pidfd < 0) continue;  // it exited meanwhile
    const int error = pidfd_signal(pidfd, SIGKILL);
    close(pidfd);
    if (error == 0) {
      spdlog::warn("usage watchdog: killed pid {} of tenant {} (on_violation: kill)", v.pid, tenants[t].name);
      segment_->tenants[t].gpu[v.gpu].watchdog_kills.fetch_add(1, std::memory_order_relaxed);
    } else if (v.is_new) {
      // Typically EPERM: the daemon lacks CAP_KILL for another user's process.
      spdlog::error("usage watchdog: cannot kill pid {} of tenant {}: {} (the scheduler needs CAP_KILL to end "
                    "other users' processes; docs/reference/operations.md)",
                    v.pid, tenants[t].name, std::strerror(error));
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
