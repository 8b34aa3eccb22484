// Registrar (registrar.h).
#include "scheduler/clients/registrar.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>
#include <system_error>

#include "scheduler/tenants/tenant_assignment.h"

namespace cuslice {

Registrar::Registrar(SharedSegment& segment, TenantRegions& regions, TenantTable& tenants, ProcessTable& processes)
    : segment_(segment), regions_(regions), tenants_(tenants), processes_(processes) {}

namespace {

// Stores 0 in each of `words`: a slot's fields that its previous process left.
template <typename... Words>
void zero_all(Words&... words) {
  (words.store(0, std::memory_order_relaxed), ...);
}

}  // namespace

Admission Registrar::admit(const Peer& peer, const wire::RegisterRequest& request) {
  wire::RegisterRequest req = request;
  Admission out;
  // The decoder checked the name's form and bounded the declared charges.
  req.tenant[sizeof req.tenant - 1] = '\0';
  const PeerIdentity identity{peer.pid, peer.uid, peer.gid, peer.cgroup};
  // A device plugin tenant is joined with its credential from its pod only (plugin_tenants.h).
  const PluginJoin join = tenants_.plugin_tenants().check_join(req.tenant, identity.cgroup);
  const Config& config = tenants_.config();
  const Assignment assignment = join.plugin ? Assignment{join.ok ? 0 : -1, join.reason}
                                            : assign_tenant(config, identity, req.tenant);
  if (assignment.tenant < 0) {
    out.status = wire::RegisterStatus::kRefused;
    out.message = assignment.reason;
    return out;
  }
  const std::string& name = join.plugin ? join.tenant : config.tenants[assignment.tenant].name;
  const uint32_t tenant = active_tenant(name);
  const FreeSlots slots = free_slots();
  std::string problem = capacity_problem(tenant, name, slots);
  if (problem.empty()) problem = ensure_region(tenant, name);
  if (!problem.empty()) {
    out.status = wire::RegisterStatus::kFull;
    out.message = problem;
    return out;
  }
  const bool mps = joins_mps(tenant, peer);
  out.slot_generation = fill_slot(slots.first, tenant, peer, req);
  if (mps) {
    processes_.set_mps(slots.first);
    out.flags |= wire::RegisterReply::kJoinMps;
  }
  if (join.plugin) tenants_.plugin_tenants().joined(name, identity.cgroup);
  out.status = wire::RegisterStatus::kOk;
  out.slot = slots.first;
  out.tenant = tenant;
  out.region_fd = regions_.fd(tenant);
  out.segment_fd = segment_.readonly_fd();
  out.segment_generation = segment_->generation;
  out.shm_name = segment_.name();
  spdlog::info("pid {} (uid {}) joined tenant {} in slot {}", peer.pid, peer.uid, name, slots.first);
  return out;
}

uint32_t Registrar::active_tenant(const std::string& name) const {
  uint32_t tenant = shm::kNoTenant;
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t)
    if (segment_->tenants[t].state.load() == shm::Tenant::kActive && name == segment_->tenants[t].name) tenant = t;
  return tenant;
}

Registrar::FreeSlots Registrar::free_slots() const {
  FreeSlots slots;
  for (uint32_t s = 0; s < shm::kMaxProcesses; ++s) {
    if (segment_->processes[s].state.load() != shm::ProcessSlot::kFree) continue;
    if (slots.first == shm::kMaxProcesses) slots.first = s;
    ++slots.count;
  }
  return slots;
}

std::string Registrar::capacity_problem(uint32_t tenant, const std::string& name, const FreeSlots& slots) const {
  const int has = tenant == shm::kNoTenant ? 0 : processes_.in_tenant(tenant);
  return tenant == shm::kNoTenant              ? "tenant table full"
         : slots.first == shm::kMaxProcesses  ? "all process slots are in use"
         : has >= kMaxProcessesPerTenant ? "tenant " + name + " already has " + std::to_string(has) +
                                              " processes, the most one tenant may have"
         : slots.count <= kReservedSlots && has >= kSmallTenantProcesses
             ? "the last " + std::to_string(slots.count) + " process slots are kept for tenants with fewer than " +
                   std::to_string(kSmallTenantProcesses) + " processes"
             : "";
}

std::string Registrar::ensure_region(uint32_t tenant, const std::string& name) {
  if (regions_.get(tenant) != nullptr) return "";
  try {
    regions_.create(tenant);  // its creation failed when the tenant was added
  } catch (const std::system_error& e) {
    spdlog::error("tenant {}: {}", name, e.what());
    return "the scheduler cannot create the tenant's shared memory";
  }
  return "";
}

uint64_t Registrar::fill_slot(uint32_t slot, uint32_t tenant, const Peer& peer, const wire::RegisterRequest& req) {
  shm::ProcessSlot& ps = segment_->processes[slot];
  shm::TenantRegion& region = *regions_.get(tenant);
  shm::ProcessUse& use = region.processes[slot];
  const uint64_t start_time = peer.start_time;
  const std::optional<uint64_t> card = tenants_.config().scheduler.gpu_memory;
  ps.tenant.store(tenant, std::memory_order_relaxed);
  ps.pid.store(peer.pid, std::memory_order_relaxed);
  ps.start_time.store(start_time, std::memory_order_relaxed);
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    ps.gpu_flags[g].store(0, std::memory_order_relaxed);
    use.gpu_flags[g].store(0, std::memory_order_relaxed);
    // A process registering again after a daemon restart brings the bytes it holds; no
    // claim holds more than the card.
    const uint64_t charged = card ? std::min(req.charged[g], *card) : req.charged[g];
    use.charged[g].store(charged, std::memory_order_relaxed);
    add_saturating(region.gpu[g].memory_used, charged);
  }
  // Nothing of the slot's previous process: the new one starts its requests from scratch.
  zero_all(use.checkpoint_flags, ps.memory_decision);
  // The fast suspension starts from nothing too: no order, no report.
  zero_all(ps.move_seq, ps.move_bytes, ps.move_order);
  zero_all(use.move_flags, use.move_done, use.move_result, use.moved_bytes, use.movable_bytes, use.pool_bytes,
           use.move_ns);
  tenants_.write_move_policy(tenant, ps);
  const uint64_t generation = ps.generation.fetch_add(1, std::memory_order_relaxed) + 1;
  ps.state.store(shm::ProcessSlot::kActive, std::memory_order_release);
  processes_.add({slot, tenant, peer.pid, peer.uid, start_time, {}});
  return generation;
}

bool Registrar::joins_mps(uint32_t tenant, const Peer& peer) const {
  if (!tenants_.joins_mps(tenant) ||
      segment_->spatial.mps_state.load(std::memory_order_acquire) != shm::SpatialState::kMpsRunning)
    return false;
  for (const ProcessRecord& p : processes_.all()) {
    if (!p.mps || p.uid == peer.uid) continue;
    spdlog::warn("pid {} (uid {}) of tenant {} runs beside the MPS server, not in it: the server serves uid {}",
                 peer.pid, peer.uid, segment_->tenants[tenant].name, p.uid);
    return false;
  }
  return true;
}

bool Registrar::release(uint32_t slot) {
  const ProcessRecord* record = processes_.at(slot);
  if (record == nullptr) return false;
  const uint32_t tenant = record->tenant;
  shm::ProcessSlot& ps = segment_->processes[slot];
  if (shm::TenantRegion* region = regions_.get(tenant)) {
    shm::ProcessUse& use = region->processes[slot];
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
      // Whatever the record says, the counter only goes down to zero.
      sub_saturating(region->gpu[g].memory_used, use.charged[g].exchange(0, std::memory_order_acq_rel));
      use.gpu_flags[g].store(0, std::memory_order_relaxed);
    }
  }
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) ps.gpu_flags[g].store(0, std::memory_order_relaxed);
  ps.pid.store(0, std::memory_order_relaxed);
  ps.state.store(shm::ProcessSlot::kFree, std::memory_order_release);
  processes_.remove(slot);
  if (tenant >= shm::kMaxTenants || processes_.in_tenant(tenant) > 0) return false;
  // Last process gone: whatever is still counted was leaked by a process killed between
  // its two bookkeeping steps.
  if (shm::TenantRegion* region = regions_.get(tenant))
    for (shm::TenantGpuUse& g : region->gpu) g.memory_used.store(0, std::memory_order_relaxed);
  for (shm::TenantGpu& g : segment_->tenants[tenant].gpu) g.memory_used.store(0, std::memory_order_relaxed);
  return tenants_.release_if_retired(tenant);
}

}  // namespace cuslice
