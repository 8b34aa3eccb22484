// The daemon's tenant table: the configuration (the file's tenants, or those `cuslice run`
// added) and the device plugin's tenants, applied to the segment's tenant entries with the
// quotas, shares and limits the hooks read, and kept as the TenantParams the token policies
// read. A tenant keeps its entry across reloads; an entry given to a new tenant gets a fresh
// tenant region, and a removed tenant whose processes still run is retired until they exit.
//
// Owns the configuration, the plugin tenants and the policies' tenant parameters. Reads how
// many processes each tenant has (ProcessTable); never touches the sockets, the token or a
// process's slot: what follows a change (the policies reconfigured, usage counters started
// afresh) is the daemon's to do with what apply() returns.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "config/tenant_config.h"
#include "scheduler/segment/process_table.h"
#include "scheduler/segment/shared_segment.h"
#include "scheduler/segment/tenant_regions.h"
#include "scheduler/tenants/memory_quota.h"
#include "scheduler/tenants/plugin_tenants.h"
#include "scheduler/tenants/tenant_params.h"

namespace cuslice {

// Where the tenants come from.
struct TenantSource {
  std::string config_path;  // empty with `ephemeral`
  bool ephemeral = false;   // no file: tenants are added by `cuslice run` and live in memory
};

struct ReloadOutcome {
  bool ok = false;
  std::vector<std::string> errors;  // file:line:column: message
};

// The configuration the daemon starts with: the file (errors are logged one per line, then
// std::runtime_error is thrown), or no tenants at all when ephemeral.
Config load_tenant_config(const TenantSource& source);

class TenantTable {
 public:
  // `config`: load_tenant_config(source). Stores the references; touches none of them before
  // apply().
  TenantTable(TenantSource source, Config config, SharedSegment& segment, TenantRegions& regions,
              const ProcessTable& processes);

  // Writes the configuration and the plugin's tenants into the segment's entries. Returns the
  // entries given to a tenant afresh, whose usage starts from zero.
  std::vector<uint32_t> apply();
  // Reads the file again. On success the new configuration is in place, to be applied; on
  // failure the running one stays and the errors are logged.
  ReloadOutcome reload();
  // Tenant entry t's last process left: frees the entry if its tenant was removed. True when
  // it did (the policies must forget the tenant).
  bool release_if_retired(uint32_t t);
  // Without a file: takes `name`, which `cuslice run` added, out of the configuration (apply()
  // then retires it while processes of it still run). False when there was nothing to take.
  bool forget_added(const std::string& name);
  // A process of tenant t is a client of an MPS server that is not the scheduler's: the tenant
  // joins the spatial group of each of its GPUs until it is removed. True when that is new
  // (apply() then, and the policies reconfigured).
  bool mark_foreign_mps(uint32_t t);
  // Whether tenant t's new processes connect to the scheduler's MPS server: the
  // configuration puts it in the spatial group of every GPU it may use.
  bool joins_mps(uint32_t t) const { return t < shm::kMaxTenants && present(t) && joins_mps_[t]; }

  const TenantSource& source() const { return source_; }
  const Config& config() const { return config_; }
  // For `cuslice run`'s ensure-tenant; apply() afterwards.
  Config& config() { return config_; }
  PluginTenants& plugin_tenants() { return plugin_tenants_; }
  const PluginTenants& plugin_tenants() const { return plugin_tenants_; }
  // GPU g's token policy's view of the tenants, indexed by tenant entry: `present` is false
  // for free entries; the share is the tenant's share of that GPU (Config::effective_shares).
  const std::vector<TenantParams>& params(uint32_t gpu) const { return params_[gpu]; }
  bool present(uint32_t t) const { return t < shm::kMaxTenants && params_[0][t].present; }
  int priority(uint32_t t) const { return params_[0][t].priority; }
  // Whether entry t's tenant is configured preemptible (docs/design/preemption.md).
  bool preemptible(uint32_t t) const;
  // The fast suspension's word to each process of tenant t (shm::ProcessSlot::move_policy,
  // host_pool_mib, host_reserve_mib): written at registration and at every reload.
  void write_move_policy(uint32_t t, shm::ProcessSlot& slot) const;

 private:
  // The entry tenant `name` has (any state but free), else the first free one; -1: none.
  int entry_for(const std::string& name) const;
  // Entries the configuration no longer names (not `kept`): retired while they have
  // processes, else freed.
  void retire_removed(const std::array<bool, shm::kMaxTenants>& kept);
  void claim_entry(uint32_t index, const std::string& name);
  // Writes tenant `tc`'s parameters into entry `index` and the policies' view of it;
  // `shares[g]` is every tenant's share of GPU g, `i` this one's place there.
  void write_entry(uint32_t index, const TenantConfig& tc, const Config& config,
                   const std::array<std::vector<double>, shm::kMaxGpus>& shares, size_t i);
  void free_entry(uint32_t index);
  // Entry `index`'s record of tenants side by side (shm::TenantSpatial).
  void write_spatial(uint32_t index, const TenantConfig& tc, const Config& config, const MemoryQuota& quota);

  TenantSource source_;
  Config config_;
  PluginTenants plugin_tenants_;  // the device plugin's, applied beside config_
  std::array<std::vector<TenantParams>, shm::kMaxGpus> params_;
  // Per entry: one of its processes is a client of an MPS server the application started.
  std::array<bool, shm::kMaxTenants> foreign_mps_{};
  std::array<bool, shm::kMaxTenants> joins_mps_{};
  SharedSegment& segment_;
  TenantRegions& regions_;
  const ProcessTable& processes_;
};

}  // namespace cuslice
