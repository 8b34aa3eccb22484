// What the daemon knows of the tenants' memory, in the policy's terms (memory_preemption.h):
// the tenants with their processes and what each holds and says of itself, each card's size
// and free memory, the host's available memory. Read fresh at every call from the tenant
// table, the registered processes, the tenant regions and /proc/meminfo; what a tenant's
// processes write (their regions) is their word, bounded where the policy relies on it.
//
// Owns the cards' sizes as the daemon measured them and the meminfo path. Writes nothing:
// never touches the segment's words, the suspensions or the policy's state.
#pragma once

#include <optional>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "protocol/shm_protocol.h"
#include "scheduler/preemption/memory_preemption.h"
#include "scheduler/preemption/suspension.h"
#include "scheduler/segment/process_table.h"
#include "scheduler/segment/shared_segment.h"
#include "scheduler/segment/tenant_regions.h"
#include "scheduler/tenants/tenant_table.h"

namespace cuslice {

class MemoryFacts {
 public:
  MemoryFacts(std::string meminfo_path, const SharedSegment& segment, const TenantRegions& regions,
              const ProcessTable& processes, const TenantTable& tenants);

  // Each card's memory as the daemon itself knows it (NVML; 0: unknown, then the
  // configuration's gpu_memory). What a tenant's hook reports is never used.
  void set_card_sizes(const std::array<uint64_t, shm::kMaxGpus>& sizes) { card_ = sizes; }

  // The tenants by entry, with their registered processes, and those of `suspensions` that an
  // earlier daemon left suspended and have not registered again (their threads wait inside
  // the driver), with the memory the journal recorded.
  std::vector<PreemptTenant> tenants(const Suspensions& suspensions) const;
  // Each GPU's size and what the tenants leave free of it, those off the card as `policy` says.
  std::vector<GpuMemory> gpus(const MemoryPreemption& policy) const;
  // Tenant t's memory quota on GPU g in bytes, as the configuration gives it (a percentage
  // against the card's size); nullopt: none, or a percentage of a card of unknown size.
  std::optional<uint64_t> quota(uint32_t t, uint32_t g) const;
  // The host's available memory (0, logged, when it cannot be read: nothing is suspended).
  uint64_t host_available() const;
  // What tenant t's process in `slot` holds now, by GPU, by its own count.
  std::vector<uint64_t> charged(uint32_t t, uint32_t slot) const;
  // Tenant t's registered processes (none while it has no region), and each with what it
  // holds now (charged()).
  std::vector<ProcessRecord> registered(uint32_t t) const;
  std::vector<Suspension::Process> processes_of(uint32_t t) const;

 private:
  PreemptTenant tenant(uint32_t t) const;
  PreemptProcess process(const ProcessRecord& rec, const shm::TenantRegion& region) const;

  std::string meminfo_path_;
  std::array<uint64_t, shm::kMaxGpus> card_{};
  const SharedSegment& segment_;
  const TenantRegions& regions_;
  const ProcessTable& processes_;
  const TenantTable& tenants_;
};

}  // namespace cuslice
