// The ledger's wiring (ledger.h): each call goes to the part that decides it, with the state
// of the others it reads. No decision is taken here.
#include "device_plugin/ledger.h"

#include "device_plugin/compute_shares.h"
#include "device_plugin/preferred_allocation.h"

namespace cuslice::device_plugin {

Ledger::Ledger(LedgerOptions options)
    : options_(options),
      gpus_(options.max_units),
      pairing_(options.pairing_window),
      reconciler_(options.unseen_grace, options.removal_delay) {}

void Ledger::set_gpus(const std::vector<Gpu>& gpus) { gpus_.set(gpus); }
void Ledger::set_held_back(uint32_t gpu, uint64_t bytes) { gpus_.set_held_back(gpu, bytes); }
const std::vector<Gpu>& Ledger::gpus() const { return gpus_.all(); }
const Gpu* Ledger::gpu_by_uuid(const std::string& uuid) const { return gpus_.by_uuid(uuid); }
const Gpu* Ledger::gpu_by_index(uint32_t index) const { return gpus_.by_index(index); }
uint32_t Ledger::capacity_units(const Gpu& gpu) const { return gpus_.capacity_units(gpu); }

std::set<uint32_t> Ledger::used_units(uint32_t gpu) const { return allocations_.used_units(gpu); }
const std::map<std::string, Allocation>& Ledger::allocations() const { return allocations_.all(); }

uint32_t Ledger::tenant_room() const {
  uint32_t ours = 0;
  for (const auto& [name, a] : allocations_.all()) ours += a.tenant.empty() ? 0 : 1;
  const uint64_t held = uint64_t{ours} + other_tenants_;
  return held >= options_.max_tenants ? 0 : options_.max_tenants - static_cast<uint32_t>(held);
}

std::vector<Device> Ledger::memory_devices() const {
  return device_plugin::memory_devices(gpus_, allocations_, scheduler_reachable_, {tenant_room(), options_.placement});
}

std::vector<Device> Ledger::compute_devices() const {
  return device_plugin::compute_devices(gpus_, scheduler_reachable_);
}

std::vector<std::string> Ledger::preferred_memory(const std::vector<std::string>& available,
                                                  const std::vector<std::string>& must_include, size_t size,
                                                  Clock::time_point now) const {
  return device_plugin::preferred_memory(gpus_, allocations_, available, must_include, size,
                                         pairing_.compute_waiting(now), options_.placement);
}

std::vector<std::string> Ledger::preferred_compute(const std::vector<std::string>& available,
                                                   const std::vector<std::string>& must_include, size_t size) const {
  return device_plugin::preferred_compute(available, must_include, size);
}

Ledger::MemoryOutcome Ledger::allocate_memory(const std::vector<std::string>& ids, Clock::time_point now,
                                              const std::string& fresh_tenant, const std::string& fresh_key) {
  return device_plugin::allocate_memory(gpus_, allocations_, pairing_, ids, now, fresh_tenant, fresh_key);
}

std::string Ledger::allocate_compute(const std::vector<std::string>& ids, Clock::time_point now) {
  return device_plugin::allocate_compute(gpus_, allocations_, pairing_, ids, now);
}

StartOutcome Ledger::start_compute(const std::vector<std::string>& ids, const std::vector<Holding>& holdings,
                                   Clock::time_point now) {
  reconciler_.link_only(allocations_, holdings, now);
  return check_start(allocations_, ids, holdings);
}

void Ledger::refuse_compute(const std::string& tenant) {
  if (Allocation* a = allocations_.find(tenant)) a->compute_refused = true;
}

void Ledger::settle_pairing(const std::vector<Holding>& holdings, Clock::time_point now) {
  const std::vector<std::string>* ids = pairing_.last_compute(now);
  if (!ids) return;
  reconciler_.link_only(allocations_, holdings, now);
  if (const Holding* holder = holder_of(holdings, *ids)) pairing_.settle_compute(holder->memory_ids.empty());
}

void Ledger::forget(const std::string& tenant) { allocations_.forget(tenant); }
void Ledger::restore(Allocation allocation) { allocations_.restore(std::move(allocation)); }

Ledger::ReconcileResult Ledger::reconcile(const std::vector<Holding>& holdings, Clock::time_point now,
                                          bool may_remove) {
  return reconciler_.reconcile(gpus_, allocations_, holdings, now, may_remove);
}

uint32_t Ledger::share_ppm(const Allocation& allocation) const {
  return device_plugin::share_ppm(allocation, allocations_);
}

uint32_t Ledger::limit_ppm(const Allocation& allocation) const {
  return device_plugin::limit_ppm(allocation, allocations_, options_.cap_compute);
}

}  // namespace cuslice::device_plugin
