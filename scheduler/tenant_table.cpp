// The daemon's tenant table: which segment entry each configured tenant has, with the
// quotas, shares and limits the hooks and the policies read, applied at start, on reload,
// when `cuslice run` adds a tenant and when the device plugin changes its tenants (which
// every application of the file's tenants keeps, plugin_tenants.h); each entry given to a
// tenant gets a new tenant region. Calls the config loader, the segment, the tenant regions
// and the policies' reconfigure(); never the client sockets (clients.cpp) nor the token
// (scheduling.cpp), except that a reload runs one scheduling step at once.
#include <systemd/sd-daemon.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "clock.h"
#include "daemon.h"
#include "memory_quota.h"
#include "ppm.h"
#include "tenant_table.h"

namespace cuslice {

Config load_daemon_config(const DaemonOptions& options) {
  if (options.ephemeral) return Config{};  // tenants arrive from `cuslice run`
  const std::string& path = options.config_path;
  ConfigResult result = load_config_file(path);
  if (!result.ok()) {
    for (const ConfigError& e : result.errors) spdlog::error("{}", e.to_string());
    throw std::runtime_error("invalid configuration " + path);
  }
  return std::move(result.config);
}

PolicyParams policy_params(const Config& config) {
  PolicyParams p;
  p.quantum = config.scheduler.quantum;
  p.limit_window = config.scheduler.limit_window;
  // Queued work is kept short by the hook; a holder that does not drain within a slice (or
  // 20 ms, if the slice is longer) is not waited for longer than that.
  p.drain_timeout = std::min<std::chrono::nanoseconds>(config.scheduler.quantum, std::chrono::milliseconds(20));
  return p;
}

// A free entry given to a new tenant starts from zero: counters left by the tenant that
// had the entry before must not be billed to this one, and the processes that had its
// region must not write the new tenant's: it gets a new one.
void Daemon::claim_tenant_entry(uint32_t index, const std::string& name) {
  shm::Tenant& t = segment_->tenants[index];
  std::memset(t.name, 0, sizeof t.name);
  std::strncpy(t.name, name.c_str(), sizeof t.name - 1);
  for (std::atomic<uint64_t>* counter : {&t.suspensions, &t.suspended_ns, &t.suspend_ns, &t.resume_ns})
    counter->store(0, std::memory_order_relaxed);
  t.preemption.store(0, std::memory_order_relaxed);
  try {
    regions_.create(index);
  } catch (const std::system_error& e) {
    // Registration tries again, and refuses the process if it fails then too.
    spdlog::error("tenant {}: {}", name, e.what());
  }
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    shm::TenantGpu& tg = t.gpu[g];
    for (std::atomic<uint64_t>* counter :
         {&tg.memory_used, &tg.gpu_time_ns, &tg.wait_ns, &tg.oom_refusals, &tg.token_grants})
      counter->store(0, std::memory_order_relaxed);
    tg.achieved_share_ppm.store(0, std::memory_order_relaxed);
    tg.moved_mib.store(0, std::memory_order_relaxed);
    usage_seen_[index][g] = {};
    // The counter starts at zero now: time reported before the first periodic sample
    // counts toward the share too.
    share_windows_[index][g].reset();
    share_windows_[index][g].sample(std::chrono::nanoseconds(now_ns()), 0);
  }
}


void Daemon::apply_config(const Config& file) {
  segment_->lower_timeslice_us.store(static_cast<uint32_t>(file.scheduler.lower_priority_timeslice.count()),
                                     std::memory_order_relaxed);
  std::array<bool, shm::kMaxTenants> kept{};
  // The device plugin's tenants beside the file's, with the shares it gave them.
  Config config = file;
  std::vector<double> shares = file.effective_shares();
  plugin_tenants_.append_to(config, shares);
  for (size_t i = 0; i < config.tenants.size(); ++i) {
    const TenantConfig& tc = config.tenants[i];
    // Same name, same index: processes already registered keep their tenant.
    int index = -1;
    for (uint32_t t = 0; t < shm::kMaxTenants && index < 0; ++t)
      if (segment_->tenants[t].state.load() != shm::Tenant::kFree && tc.name == segment_->tenants[t].name)
        index = static_cast<int>(t);
    for (uint32_t t = 0; t < shm::kMaxTenants && index < 0; ++t)
      if (segment_->tenants[t].state.load() == shm::Tenant::kFree) index = static_cast<int>(t);
    if (index < 0) {
      spdlog::error("no room for tenant {}: removed tenants still have processes", tc.name);
      continue;
    }
    shm::Tenant& t = segment_->tenants[index];
    if (t.state.load() == shm::Tenant::kFree) claim_tenant_entry(static_cast<uint32_t>(index), tc.name);
    const MemoryQuota quota = memory_quota(tc.memory, config.scheduler.gpu_memory);
    t.memory_quota.store(quota.bytes, std::memory_order_relaxed);
    t.memory_quota_ppm.store(quota.ppm, std::memory_order_relaxed);
    t.priority.store(static_cast<uint32_t>(tc.priority), std::memory_order_relaxed);
    t.share_ppm.store(percent_to_ppm(shares[i]), std::memory_order_relaxed);
    t.limit_ppm.store(percent_to_ppm(tc.limit_percent), std::memory_order_relaxed);
    t.state.store(shm::Tenant::kActive, std::memory_order_release);
    tenant_params_[index] = {true, static_cast<int>(tc.priority), shares[i] / 100.0, tc.limit_percent / 100.0};
    kept[index] = true;
  }
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    if (kept[t] || segment_->tenants[t].state.load() == shm::Tenant::kFree) continue;
    if (tenant_processes_[t] > 0) {
      // Its processes keep running under the old parameters; nobody new may join.
      segment_->tenants[t].state.store(shm::Tenant::kRetired, std::memory_order_release);
      spdlog::info("tenant {} removed; kept until its {} processes exit", segment_->tenants[t].name,
                   tenant_processes_[t]);
    } else {
      free_tenant_entry(t);
    }
  }
  for (TokenPolicy& p : policies_) p.reconfigure(policy_params_, tenant_params_);
  configure_preemption();
}

void Daemon::free_tenant_entry(uint32_t index) {
  segment_->tenants[index].state.store(shm::Tenant::kFree, std::memory_order_release);
  tenant_params_[index] = {};
  regions_.drop(index);
}

Daemon::ReloadOutcome Daemon::reload() {
  ReloadOutcome outcome;
  if (options_.ephemeral) {
    outcome.errors.push_back("started with --ephemeral: tenants come from `cuslice run`, there is no file to reload");
    spdlog::warn("{}", outcome.errors.back());
    return outcome;
  }
  ConfigResult result = load_config_file(options_.config_path);
  if (!result.ok()) {
    for (const ConfigError& e : result.errors) {
      spdlog::error("{}", e.to_string());
      outcome.errors.push_back(e.to_string());
    }
    spdlog::error("reload of {} refused: keeping the running configuration", options_.config_path);
    return outcome;
  }
  if (result.config.scheduler.metrics_port != config_.scheduler.metrics_port ||
      result.config.scheduler.metrics_address != config_.scheduler.metrics_address)
    spdlog::warn("scheduler.metrics_port or metrics_address changed: it takes effect when the scheduler restarts");
  config_ = std::move(result.config);
  policy_params_ = policy_params(config_);
  apply_config(config_);
  segment_->quantum_ns = static_cast<uint64_t>(config_.scheduler.quantum.count());
  spdlog::info("reloaded {}: {} tenants", options_.config_path, config_.tenants.size());
  schedule();
  outcome.ok = true;
  return outcome;
}

Daemon::ReloadOutcome Daemon::reload_notifying_systemd() {
  sd_notify(0, "RELOADING=1");
  ReloadOutcome outcome = reload();
  sd_notify(0, "READY=1");
  return outcome;
}

}  // namespace cuslice
