// TenantTable (tenant_table.h): loading the configuration, and writing it with the device
// plugin's tenants into the segment's tenant entries.
#include "scheduler/tenants/tenant_table.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "protocol/ppm.h"
#include "scheduler/tenants/memory_quota.h"

namespace cuslice {

Config load_tenant_config(const TenantSource& source) {
  if (source.ephemeral) return Config{};  // tenants arrive from `cuslice run`
  const std::string& path = source.config_path;
  ConfigResult result = load_config_file(path);
  if (!result.ok()) {
    for (const ConfigError& e : result.errors) spdlog::error("{}", e.to_string());
    throw std::runtime_error("invalid configuration " + path);
  }
  return std::move(result.config);
}

TenantTable::TenantTable(TenantSource source, Config config, SharedSegment& segment, TenantRegions& regions,
                         const ProcessTable& processes)
    : source_(std::move(source)),
      config_(std::move(config)),
      segment_(segment),
      regions_(regions),
      processes_(processes) {
  static_assert(kMaxConfigGpus == shm::kMaxGpus, "a tenant's `gpus` name the segment's GPUs");
  params_.fill(std::vector<TenantParams>(shm::kMaxTenants));
}

// A free entry given to a new tenant starts from zero: counters left by the tenant that
// had the entry before must not be billed to this one, and the processes that had its
// region must not write the new tenant's: it gets a new one.
void TenantTable::claim_entry(uint32_t index, const std::string& name) {
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
    tg.share_ppm.store(0, std::memory_order_relaxed);
    tg.moved_mib.store(0, std::memory_order_relaxed);
  }
}

std::vector<uint32_t> TenantTable::apply() {
  const Config& file = config_;
  segment_->lower_timeslice_us.store(static_cast<uint32_t>(file.scheduler.lower_priority_timeslice.count()),
                                     std::memory_order_relaxed);
  segment_->quantum_ns = static_cast<uint64_t>(file.scheduler.quantum.count());
  std::vector<uint32_t> claimed;
  std::array<bool, shm::kMaxTenants> kept{};
  // The device plugin's tenants beside the file's, each on its GPU with the share it gave.
  Config config = file;
  plugin_tenants_.append_to(config);
  std::array<std::vector<double>, shm::kMaxGpus> shares;
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) shares[g] = config.effective_shares(g);
  for (size_t i = 0; i < config.tenants.size(); ++i) {
    const TenantConfig& tc = config.tenants[i];
    const int index = entry_for(tc.name);
    if (index < 0) {
      spdlog::error("no room for tenant {}: removed tenants still have processes", tc.name);
      continue;
    }
    if (segment_->tenants[index].state.load() == shm::Tenant::kFree) {
      claim_entry(static_cast<uint32_t>(index), tc.name);
      claimed.push_back(static_cast<uint32_t>(index));
    }
    write_entry(static_cast<uint32_t>(index), tc, config, shares, i);
    kept[index] = true;
  }
  retire_removed(kept);
  return claimed;
}

int TenantTable::entry_for(const std::string& name) const {
  // Same name, same index: processes already registered keep their tenant.
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t)
    if (segment_->tenants[t].state.load() != shm::Tenant::kFree && name == segment_->tenants[t].name)
      return static_cast<int>(t);
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t)
    if (segment_->tenants[t].state.load() == shm::Tenant::kFree) return static_cast<int>(t);
  return -1;
}

void TenantTable::retire_removed(const std::array<bool, shm::kMaxTenants>& kept) {
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    if (kept[t] || segment_->tenants[t].state.load() == shm::Tenant::kFree) continue;
    if (processes_.in_tenant(t) > 0) {
      // Its processes keep running under the old parameters; nobody new may join.
      segment_->tenants[t].state.store(shm::Tenant::kRetired, std::memory_order_release);
      spdlog::info("tenant {} removed; kept until its {} processes exit", segment_->tenants[t].name,
                   processes_.in_tenant(t));
    } else {
      free_entry(t);
    }
  }
}

void TenantTable::write_entry(uint32_t index, const TenantConfig& tc, const Config& config,
                              const std::array<std::vector<double>, shm::kMaxGpus>& shares, size_t i) {
  shm::Tenant& t = segment_->tenants[index];
  const MemoryQuota quota = memory_quota(tc.memory, config.scheduler.gpu_memory);
  t.memory_quota.store(quota.bytes, std::memory_order_relaxed);
  t.memory_quota_ppm.store(quota.ppm, std::memory_order_relaxed);
  t.priority.store(static_cast<uint32_t>(tc.priority), std::memory_order_relaxed);
  // The tenant-wide figure (for readers of an older layout): its share on its first GPU.
  uint32_t first = 0;
  while (first + 1 < shm::kMaxGpus && !tc.on_gpu(first)) ++first;
  t.share_ppm.store(percent_to_ppm(shares[first][i]), std::memory_order_relaxed);
  t.limit_ppm.store(percent_to_ppm(tc.limit_percent), std::memory_order_relaxed);
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    // 0 where the tenant may not use the GPU: `cuslice status` shows it on its GPUs only.
    t.gpu[g].share_ppm.store(tc.on_gpu(g) ? percent_to_ppm(shares[g][i]) : 0, std::memory_order_relaxed);
    params_[g][index] = {true, static_cast<int>(tc.priority), shares[g][i] / 100.0, tc.limit_percent / 100.0,
                         config.spatial_member(tc, g)};
  }
  write_spatial(index, tc, config, quota);
  t.state.store(shm::Tenant::kActive, std::memory_order_release);
}

void TenantTable::write_spatial(uint32_t index, const TenantConfig& tc, const Config& config, const MemoryQuota& quota) {
  shm::TenantSpatial& sp = segment_->spatial.tenants[index];
  uint32_t group = 0;
  int top = -1;  // the highest priority among the spatial tenants of its GPUs
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    if (!config.spatial_member(tc, g)) continue;
    group |= 1u << g;
    for (const TenantConfig& other : config.tenants)
      if (config.spatial_member(other, g)) top = std::max(top, static_cast<int>(other.priority));
  }
  joins_mps_[index] = group != 0;
  // A tenant whose processes brought their own MPS server runs with the group on its GPUs:
  // time-slicing clients of one server against each other stalls them (a quantum each).
  if (foreign_mps_[index])
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g)
      if (tc.on_gpu(g)) {
        group |= 1u << g;
        params_[g][index].spatial = true;
      }
  sp.group_gpus.store(group, std::memory_order_relaxed);
  sp.sm_percent.store(tc.sm_percent.value_or(100), std::memory_order_relaxed);
  // MPS has two client priorities: the top tenants of the group at normal, the rest below.
  sp.client_priority.store(group != 0 && static_cast<int>(tc.priority) < top ? 1 : 0, std::memory_order_relaxed);
  // A second line behind the hook's quota, for what reaches the driver past it: the quota and
  // the room a context takes beyond its allocations.
  const uint64_t limit = quota.bytes == shm::kUnlimited || quota.bytes == 0
                             ? 0
                             : (quota.bytes + config.scheduler.preemption.room_margin + (1u << 20) - 1) >> 20;
  sp.memory_limit_mib.store(static_cast<uint32_t>(std::min<uint64_t>(limit, UINT32_MAX)), std::memory_order_relaxed);
}

void TenantTable::free_entry(uint32_t index) {
  segment_->tenants[index].state.store(shm::Tenant::kFree, std::memory_order_release);
  segment_->spatial.tenants[index].group_gpus.store(0, std::memory_order_relaxed);
  foreign_mps_[index] = false;
  joins_mps_[index] = false;
  for (std::vector<TenantParams>& per_gpu : params_) per_gpu[index] = {};
  regions_.drop(index);
}

bool TenantTable::release_if_retired(uint32_t t) {
  if (t >= shm::kMaxTenants || segment_->tenants[t].state.load() != shm::Tenant::kRetired) return false;
  free_entry(t);
  return true;
}

bool TenantTable::forget_added(const std::string& name) {
  const int c = config_.find_tenant(name);
  if (!source_.ephemeral || c < 0) return false;
  config_.tenants.erase(config_.tenants.begin() + c);
  return true;
}

ReloadOutcome TenantTable::reload() {
  ReloadOutcome outcome;
  if (source_.ephemeral) {
    outcome.errors.push_back("started with --ephemeral: tenants come from `cuslice run`, there is no file to reload");
    spdlog::warn("{}", outcome.errors.back());
    return outcome;
  }
  ConfigResult result = load_config_file(source_.config_path);
  if (!result.ok()) {
    for (const ConfigError& e : result.errors) {
      spdlog::error("{}", e.to_string());
      outcome.errors.push_back(e.to_string());
    }
    spdlog::error("reload of {} refused: keeping the running configuration", source_.config_path);
    return outcome;
  }
  if (result.config.scheduler.metrics_port != config_.scheduler.metrics_port ||
      result.config.scheduler.metrics_address != config_.scheduler.metrics_address)
    spdlog::warn("scheduler.metrics_port or metrics_address changed: it takes effect when the scheduler restarts");
  // The MPS control daemon serves the spatial GPUs it was started for: they stay until a restart.
  if (result.config.scheduler.spatial != config_.scheduler.spatial) {
    spdlog::warn("scheduler.spatial changed: it takes effect when the scheduler restarts");
    result.config.scheduler.spatial = config_.scheduler.spatial;
  }
  config_ = std::move(result.config);
  outcome.ok = true;
  return outcome;
}

bool TenantTable::preemptible(uint32_t t) const {
  if (t >= shm::kMaxTenants) return false;
  const int c = config_.find_tenant(segment_->tenants[t].name);
  return c >= 0 && config_.tenants[static_cast<size_t>(c)].preemptible;
}

void TenantTable::write_move_policy(uint32_t t, shm::ProcessSlot& slot) const {
  const int c = t < shm::kMaxTenants ? config_.find_tenant(segment_->tenants[t].name) : -1;
  const TenantConfig* tc = c >= 0 ? &config_.tenants[static_cast<size_t>(c)] : nullptr;
  const PreemptionSettings& p = config_.scheduler.preemption;
  const bool fast = tc != nullptr && tc->preemptible && p.fast;
  const auto mib = [](uint64_t bytes) { return static_cast<uint32_t>(std::min<uint64_t>(bytes >> 20, UINT32_MAX)); };
  slot.host_pool_mib.store(fast ? mib(tc->host_pool) : 0, std::memory_order_relaxed);
  slot.host_reserve_mib.store(mib(p.host_reserve), std::memory_order_relaxed);
  slot.move_policy.store(fast ? shm::ProcessSlot::kFastAllowed : 0, std::memory_order_release);
}

}  // namespace cuslice

namespace cuslice {

bool TenantTable::mark_foreign_mps(uint32_t t) {
  if (!present(t) || foreign_mps_[t]) return false;
  foreign_mps_[t] = true;
  return true;
}

}  // namespace cuslice
