// The allocations the device plugin has made, by tenant name: one per memory Allocate call,
// each a tenant in the scheduler, plus those adopted from containers holding memory no
// tenant of the plugin covers (under names of their own, starting with '~', and no tenant).
// Answers what follows from the record alone: which units of a GPU are used, whether an
// Allocate call repeats an earlier one.
//
// Decides nothing about requests or pods: what an Allocate call means is allocate_request's,
// what PodResources says reconciliation's, a tenant's share compute_shares'.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

namespace cuslice::device_plugin {

using Clock = std::chrono::steady_clock;

struct Workload {
  std::string pod_namespace, pod_name, container_name;
  bool operator==(const Workload&) const = default;
  bool empty() const { return pod_namespace.empty() && pod_name.empty() && container_name.empty(); }
  std::string text() const { return pod_namespace + "/" + pod_name + "/" + container_name; }
};

// One memory Allocate call: one tenant in the scheduler.
struct Allocation {
  std::string tenant;  // the scheduler's tenant name; empty: adopted (see reconcile), no tenant
  std::string key;     // the credential the container presents (CUSLICE_TENANT=name:key)
  uint32_t gpu = 0;    // Gpu::index
  std::string gpu_uuid;
  std::set<uint32_t> units;  // the GiB units (memory IDs) on that GPU
  Workload workload;         // from PodResources, once seen there
  // Compute IDs the same container holds; 0: none or not known yet (default share). Set when
  // its compute call pairs with its memory call (call_pairing.h), and from PodResources.
  uint32_t compute_percent = 0;
  // When the compute was taken from the paired call: a PodResources snapshot asked for
  // before then may not list that compute yet, and leaves it as it is.
  std::optional<Clock::time_point> compute_paired_at;
  // The container was refused at start: its compute does not fit its GPU (container_start.h).
  bool compute_refused = false;
  bool seen = false;             // PodResources has shown a container holding it
  Clock::time_point created{};
  std::optional<Clock::time_point> absent_since;  // seen before, in no snapshot since then

  uint64_t memory_bytes() const;
};

class AllocationBook {
 public:
  const std::map<std::string, Allocation>& all() const { return allocations_; }

  // Units of `gpu` held by some allocation, adopted ones included.
  std::set<uint32_t> used_units(uint32_t gpu) const;
  // The allocation with a tenant already made for exactly these units of `gpu`; null if none.
  const Allocation* find_same(uint32_t gpu, const std::set<uint32_t>& units) const;
  // The allocation named `name`, to change; null if none.
  Allocation* find(const std::string& name);

  // Records `allocation` under its tenant name; null when the name is taken.
  const Allocation* add(Allocation allocation);
  // Records `allocation` under its tenant name, replacing any there.
  void restore(Allocation allocation);
  // Records an allocation with no tenant under a fresh name of its own.
  void adopt(Allocation allocation);
  void forget(const std::string& name);
  // Removes the allocation named `name` (which must exist) and returns it.
  Allocation take(const std::string& name);

  // Calls f(name, allocation) for each, in name order; f may change the allocation but not
  // add or remove one.
  template <typename F>
  void update_each(F&& f) {
    for (auto& [name, a] : allocations_) f(name, a);
  }

 private:
  std::map<std::string, Allocation> allocations_;
  uint64_t adopted_ = 0;  // names of adopted allocations
};

}  // namespace cuslice::device_plugin
