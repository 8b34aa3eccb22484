// MemoryFacts (memory_facts.h): the segment's, the regions' and the process table's words
// turned into the policy's inputs.
#include "scheduler/preemption/memory_facts.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <set>

#include "protocol/ppm.h"
#include "protocol/saturating.h"
#include "scheduler/preemption/host_memory.h"

namespace cuslice {

MemoryFacts::MemoryFacts(std::string meminfo_path, const SharedSegment& segment, const TenantRegions& regions,
                         const ProcessTable& processes, const TenantTable& tenants)
    : meminfo_path_(std::move(meminfo_path)),
      segment_(segment),
      regions_(regions),
      processes_(processes),
      tenants_(tenants) {}

PreemptTenant MemoryFacts::tenant(uint32_t t) const {
  PreemptTenant pt;
  if (!tenants_.present(t) && segment_->tenants[t].state.load() != shm::Tenant::kRetired) return pt;
  pt.present = true;
  pt.name = segment_->tenants[t].name;
  pt.priority = tenants_.priority(t);
  pt.preemptible = tenants_.preemptible(t);
  // A quota that is not preemptible is a guarantee, the file's or one the device plugin sold.
  const shm::Tenant& st = segment_->tenants[t];
  pt.guaranteed = !pt.preemptible && (st.memory_quota.load(std::memory_order_relaxed) != shm::kUnlimited ||
                                      st.memory_quota_ppm.load(std::memory_order_relaxed) != 0);
  return pt;
}

PreemptProcess MemoryFacts::process(const ProcessRecord& rec, const shm::TenantRegion& region) const {
  // What the process said of itself on its own connection: a claim about its own tenant
  // only, which never spares the tenant unless `unsuspendable: keep` (memory_preemption.h).
  const shm::ProcessUse& use = region.processes[rec.slot];
  PreemptProcess p;
  p.pid = rec.pid;
  p.start_time = rec.start_time;
  p.gpu_bytes.resize(shm::kMaxGpus);
  uint64_t held = 0;
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    // The process's own count: at most the card (where the daemon knows its size).
    const uint64_t charged = use.charged[g].load(std::memory_order_relaxed);
    p.gpu_bytes[g] = card_[g] != 0 ? std::min(charged, card_[g]) : charged;
    held = saturating_add(held, p.gpu_bytes[g]);
  }
  const uint32_t flags = rec.checkpoint_claims;
  p.ipc = (flags & shm::ProcessSlot::kUsesIpc) != 0;
  p.managed = (flags & shm::ProcessSlot::kUsesManaged) != 0;
  p.mps = (flags & shm::ProcessSlot::kUsesMps) != 0;
  // The fast way's figures, as the process's hook reports them (the tenant's word).
  p.movable = (use.move_flags.load(std::memory_order_acquire) & shm::ProcessUse::kMovable) != 0 &&
              (segment_->processes[rec.slot].move_policy.load(std::memory_order_relaxed) &
               shm::ProcessSlot::kFastAllowed) != 0;
  // Bounded by what it holds and by the pool the daemon lets it make: a figure past them
  // would have the policy count on memory nobody has.
  p.movable_bytes = std::min(use.movable_bytes.load(std::memory_order_relaxed), held);
  p.pool_bytes = std::min(use.pool_bytes.load(std::memory_order_relaxed),
                          uint64_t{segment_->processes[rec.slot].host_pool_mib.load(std::memory_order_relaxed)} << 20);
  return p;
}

std::vector<PreemptTenant> MemoryFacts::tenants(const Suspensions& suspensions) const {
  std::vector<PreemptTenant> out(shm::kMaxTenants);
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) out[t] = tenant(t);
  std::set<int32_t> registered;
  for (const ProcessRecord& rec : processes_.all()) {
    const uint32_t t = rec.tenant;  // the daemon's own record
    const shm::TenantRegion* region = regions_.get(t);
    if (t >= shm::kMaxTenants || !out[t].present || region == nullptr) continue;
    out[t].processes.push_back(process(rec, *region));
    registered.insert(rec.pid);
  }
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    if (!out[t].present) continue;
    for (const Suspension::Process& p : suspensions[t].processes) {
      if (!p.adopted || registered.count(p.pid)) continue;
      PreemptProcess pp;
      pp.pid = p.pid;
      pp.start_time = p.start_time;
      pp.gpu_bytes = p.bytes;
      out[t].processes.push_back(std::move(pp));
    }
  }
  return out;
}

std::vector<GpuMemory> MemoryFacts::gpus(const MemoryPreemption& policy) const {
  std::vector<GpuMemory> gpus(shm::kMaxGpus);
  const std::optional<uint64_t> configured = tenants_.config().scheduler.gpu_memory;
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    uint64_t total = card_[g];
    if (total == 0 && configured) total = *configured;
    uint64_t used = 0;
    for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
      const shm::TenantRegion* region = regions_.get(t);
      if (segment_->tenants[t].state.load() == shm::Tenant::kFree || region == nullptr) continue;
      // The tenant's live counter, which its processes can set to anything: saturated, so a
      // huge value makes the card look full rather than wrap around to look empty. A suspended
      // tenant holds nothing on the card, or, suspended the fast way, what did not move.
      const uint64_t tenant_used = region->gpu[g].memory_used.load(std::memory_order_relaxed);
      used = saturating_add(used, tenant_used - policy.off_card(t, g, tenant_used));
    }
    // What processes without the hook hold, as the driver says (the usage watchdog's last
    // look): a card they filled has no room for a resumption, whatever the tenants' counters.
    used = saturating_add(used, segment_->gpus[g].unhooked_bytes.load(std::memory_order_relaxed));
    gpus[g] = {total, total > used ? total - used : 0};
  }
  return gpus;
}

std::optional<uint64_t> MemoryFacts::quota(uint32_t t, uint32_t g) const {
  if (t >= shm::kMaxTenants || g >= shm::kMaxGpus) return std::nullopt;
  const shm::Tenant& st = segment_->tenants[t];
  const uint64_t bytes = st.memory_quota.load(std::memory_order_relaxed);
  if (bytes != shm::kUnlimited) return bytes;
  const uint32_t ppm = st.memory_quota_ppm.load(std::memory_order_relaxed);
  uint64_t card = card_[g];
  if (card == 0) card = tenants_.config().scheduler.gpu_memory.value_or(0);
  if (ppm == 0 || card == 0) return std::nullopt;
  return ppm_of_bytes(card, ppm);
}

uint64_t MemoryFacts::host_available() const {
  const std::optional<uint64_t> available = read_mem_available(meminfo_path_);
  if (!available) spdlog::warn("cannot read MemAvailable from {}: nothing can be suspended", meminfo_path_);
  return available.value_or(0);
}

std::vector<uint64_t> MemoryFacts::charged(uint32_t t, uint32_t slot) const {
  std::vector<uint64_t> bytes(shm::kMaxGpus, 0);
  if (const shm::TenantRegion* region = regions_.get(t))
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g)
      bytes[g] = region->processes[slot].charged[g].load(std::memory_order_relaxed);
  return bytes;
}

std::vector<ProcessRecord> MemoryFacts::registered(uint32_t t) const {
  std::vector<ProcessRecord> out;
  if (regions_.get(t) == nullptr) return out;
  for (const ProcessRecord& rec : processes_.all())
    if (rec.tenant == t) out.push_back(rec);
  return out;
}

std::vector<Suspension::Process> MemoryFacts::processes_of(uint32_t t) const {
  std::vector<Suspension::Process> out;
  for (const ProcessRecord& rec : registered(t)) {
    Suspension::Process p;
    p.pid = rec.pid;
    p.start_time = rec.start_time;
    // As the process says (its tenant's region): what the tenant is said to give back.
    p.bytes = charged(t, rec.slot);
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace cuslice
