// What the device plugin has handed out, and every decision it takes on it, without I/O:
// which device IDs exist and are healthy, where a container's memory should go, what a
// kubelet Allocate call means, and what the PodResources API says happened afterwards.
// The caller (device_plugin.h) feeds it facts (GPUs from NVML, whether the scheduler answers,
// PodResources snapshots, the clock, fresh random credentials) and carries its answers out to
// the kubelet and the scheduler; the unit tests feed it the same facts by hand.
//
// How a container's two requests become one tenant (docs/kubernetes.md, "Design"):
//   1. The kubelet calls Allocate once per resource and container, with device IDs only, in
//      no fixed order. A memory call decides the GPU (its IDs name it) and makes the tenant:
//      allocate_memory() records an Allocation with a fresh tenant name and credential, and
//      the caller creates that tenant in the scheduler before answering the kubelet.
//   2. A compute call only checks its IDs: compute is a share of whatever GPU the
//      container's memory is on, which this call cannot know.
//   3. Afterwards the PodResources API says which container holds which IDs. reconcile()
//      links each allocation to its container (labels namespace/pod/container) and to the
//      compute IDs the same container holds (its share), and drops the allocations whose
//      container is gone.
// Each part owns its state and decides one thing, and this class wires them (one-way, the
// lower ones knowing nothing of the higher): gpu_table (the GPUs), allocation_book (what was
// handed out), advertised_devices (ListAndWatch), preferred_allocation
// (GetPreferredAllocation), allocate_request (Allocate), reconciliation (PodResources) and
// compute_shares (each tenant's share and cap).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "advertised_devices.h"
#include "allocate_request.h"
#include "allocation_book.h"
#include "device_ids.h"
#include "gpu_table.h"
#include "reconciliation.h"

namespace cuslice::device_plugin {

struct LedgerOptions {
  // An allocation no container has been seen holding is dropped after this long: the pod
  // failed admission (its other resource was refused) or never started.
  Clock::duration unseen_grace = std::chrono::seconds(60);
  // A container seen before must be missing from the snapshots this long before its tenant
  // goes: one snapshot taken while the kubelet was still starting lists no pod at all.
  Clock::duration removal_delay = std::chrono::seconds(2);
  // The tenant's share is also its cap (HAMi's gpucores); off: shares only (work-conserving).
  bool cap_compute = false;
  // At most this many GiB are advertised per GPU (the scheduler's records hold 512).
  uint32_t max_units = 512;
};

class Ledger {
 public:
  using MemoryOutcome = ::cuslice::device_plugin::MemoryOutcome;
  using ReconcileResult = ::cuslice::device_plugin::ReconcileResult;

  explicit Ledger(LedgerOptions options = {});

  // The GPUs NVML reports now. A GPU known before and missing now stays, not present.
  void set_gpus(const std::vector<Gpu>& gpus);
  void set_held_back(uint32_t gpu, uint64_t bytes);
  void set_scheduler_reachable(bool reachable) { scheduler_reachable_ = reachable; }
  bool scheduler_reachable() const { return scheduler_reachable_; }
  const std::vector<Gpu>& gpus() const;

  // GiB the GPU can hand out: (memory - held back) / 1 GiB, rounded down.
  uint32_t capacity_units(const Gpu& gpu) const;
  // Units of `gpu` held by some allocation.
  std::set<uint32_t> used_units(uint32_t gpu) const;

  // What ListAndWatch advertises. Memory: every unit below the capacity, healthy while the
  // GPU is present and the scheduler answers; a unit still held above a capacity that shrank
  // (a ConfigMap tenant got a quota) is listed, healthy, until it is given back.
  std::vector<Device> memory_devices() const;
  // Compute: 100 per GPU known, those of an absent GPU unhealthy; all unhealthy while the
  // scheduler does not answer.
  std::vector<Device> compute_devices() const;

  // GetPreferredAllocation: `size` memory IDs from `available` (must_include first), all on
  // one GPU: the GPU with the least room that fits (keeping large holes for large requests).
  // Empty when no single GPU can (the kubelet then picks, and Allocate explains the refusal).
  std::vector<std::string> preferred_memory(const std::vector<std::string>& available,
                                            const std::vector<std::string>& must_include, size_t size) const;
  std::vector<std::string> preferred_compute(const std::vector<std::string>& available,
                                             const std::vector<std::string>& must_include, size_t size) const;

  // Allocate for cuslice.io/gpu-memory. `fresh_tenant`/`fresh_key` name the tenant if one is
  // made. Refused: IDs that are not memory IDs of a GPU this node has, or IDs on several GPUs
  // (the message names the request and each GPU's free memory).
  MemoryOutcome allocate_memory(const std::vector<std::string>& ids, Clock::time_point now,
                                const std::string& fresh_tenant, const std::string& fresh_key);
  // Allocate for cuslice.io/gpu-compute: "" when the IDs are compute IDs of this node, else why not.
  std::string check_compute(const std::vector<std::string>& ids) const;
  // Forgets a tenant (its creation in the scheduler failed).
  void forget(const std::string& tenant);
  // Takes back an allocation the scheduler still holds (after the plugin restarted).
  void restore(Allocation allocation);

  // Applies a PodResources snapshot (every container holding IDs of either resource).
  // `may_remove` false: links and labels only (the kubelet restarted a moment ago and may
  // not know its pods yet).
  ReconcileResult reconcile(const std::vector<Holding>& holdings, Clock::time_point now, bool may_remove = true);

  // The tenant's share and cap, in millionths of its GPU (compute_shares.h).
  uint32_t share_ppm(const Allocation& allocation) const;
  uint32_t limit_ppm(const Allocation& allocation) const;

  // By tenant name (adopted allocations under a name of their own, starting with '~').
  const std::map<std::string, Allocation>& allocations() const;
  const Gpu* gpu_by_uuid(const std::string& uuid) const;
  const Gpu* gpu_by_index(uint32_t index) const;

 private:
  LedgerOptions options_;
  GpuTable gpus_;
  bool scheduler_reachable_ = false;
  AllocationBook allocations_;
  Reconciler reconciler_;
};

}  // namespace cuslice::device_plugin
