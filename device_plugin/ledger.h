// What the device plugin has handed out, and every decision it takes on it, without I/O:
// which device IDs exist and are healthy, where a container's memory should go, what a
// kubelet Allocate call means, whether a container may start, and what the PodResources API
// says happened afterwards. The caller (device_plugin.h) feeds it facts (GPUs from NVML,
// whether the scheduler answers and how many tenants it has, PodResources snapshots, the
// clock, fresh random credentials) and carries its answers out to the kubelet and the
// scheduler; the unit tests feed it the same facts by hand.
//
// How a container's two requests become one tenant (docs/reference/kubernetes.md, "How it fits the
// kubelet"):
//   1. The kubelet calls GetPreferredAllocation then Allocate once per resource and
//      container, with device IDs only, one container after the other, its two resources in
//      no fixed order. A memory call decides the GPU (its IDs name it) and makes the tenant:
//      allocate_memory() records an Allocation with a fresh tenant name and credential, and
//      the caller creates that tenant in the scheduler before answering the kubelet.
//   2. A compute call checks its IDs and is paired with the memory call just before or just
//      after (call_pairing.h): compute is a share of whatever GPU the container's memory is
//      on, and placement puts the memory where both fit (placement.h).
//   3. Before the container starts, the kubelet asks the compute resource (PreStartContainer):
//      the container must hold memory too, and its compute must fit its GPU
//      (container_start.h).
//   4. The PodResources API says which container holds which IDs. reconcile() links each
//      allocation to its container (labels namespace/pod/container) and to the compute IDs
//      the same container holds (its share), and drops the allocations whose container is
//      gone.
// Each part owns its state and decides one thing, and this class wires them (one-way, the
// lower ones knowing nothing of the higher): gpu_table (the GPUs), allocation_book (what was
// handed out), compute_room (compute promised per GPU), placement (which GPU),
// advertised_devices (ListAndWatch), preferred_allocation (GetPreferredAllocation),
// call_pairing and allocate_request (Allocate), container_start (PreStartContainer),
// reconciliation (PodResources) and compute_shares (each tenant's share and cap).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "device_plugin/advertised_devices.h"
#include "device_plugin/allocate_request.h"
#include "device_plugin/allocation_book.h"
#include "device_plugin/call_pairing.h"
#include "device_plugin/container_start.h"
#include "device_plugin/device_ids.h"
#include "device_plugin/gpu_table.h"
#include "device_plugin/placement.h"
#include "device_plugin/reconciliation.h"
#include "protocol/shm_protocol.h"

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
  // Which GPU of those where a container fits (--placement, placement.h).
  PlacementPolicy placement = PlacementPolicy::kBinpack;
  // How long one of a container's Allocate calls waits for its other one (call_pairing.h).
  Clock::duration pairing_window = std::chrono::seconds(10);
  // The tenants the scheduler holds at most.
  uint32_t max_tenants = shm::kMaxTenants;
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
  // The scheduler's tenants that are not the plugin's (its configuration file's).
  void set_other_tenants(uint32_t count) { other_tenants_ = count; }
  // Tenants the scheduler can still hold: at most this many containers more are advertised.
  uint32_t tenant_room() const;
  const std::vector<Gpu>& gpus() const;

  // GiB the GPU can hand out: (memory - held back) / 1 GiB, rounded down.
  uint32_t capacity_units(const Gpu& gpu) const;
  // Units of `gpu` held by some allocation.
  std::set<uint32_t> used_units(uint32_t gpu) const;

  // What ListAndWatch advertises (advertised_devices.h). Memory: every unit below the
  // capacity, healthy while the GPU is present, the scheduler answers and the node can take
  // one more container there; a unit still held above a capacity that shrank (a ConfigMap
  // tenant got a quota) is listed, healthy, until it is given back.
  std::vector<Device> memory_devices() const;
  // Compute: 100 per GPU known, those of an absent GPU unhealthy; all unhealthy while the
  // scheduler does not answer.
  std::vector<Device> compute_devices() const;

  // GetPreferredAllocation: `size` memory IDs from `available` (must_include first), all on
  // the one GPU placement chooses, with the compute of the compute call just before when it
  // waits to be paired. Empty when no single GPU holds the memory (the kubelet then picks,
  // and Allocate explains the refusal).
  std::vector<std::string> preferred_memory(const std::vector<std::string>& available,
                                            const std::vector<std::string>& must_include, size_t size,
                                            Clock::time_point now) const;
  // Whether the memory call now follows a compute call, whose container PodResources can tell
  // (call_pairing.h, rule 3): the caller then asks it, and passes the answer to settle_pairing.
  bool pairing_needs_pods(Clock::time_point now) const { return pairing_.last_compute(now) != nullptr; }
  // PodResources asked for at `now`: links what it shows, and settles whose the compute call
  // just before was.
  void settle_pairing(const std::vector<Holding>& holdings, Clock::time_point now);
  std::vector<std::string> preferred_compute(const std::vector<std::string>& available,
                                             const std::vector<std::string>& must_include, size_t size) const;

  // Allocate for cuslice.io/gpu-memory. `fresh_tenant`/`fresh_key` name the tenant if one is
  // made. Refused: IDs that are not memory IDs of a GPU this node has, or IDs on several GPUs
  // (the message names the request and each GPU's free memory).
  MemoryOutcome allocate_memory(const std::vector<std::string>& ids, Clock::time_point now,
                                const std::string& fresh_tenant, const std::string& fresh_key);
  // Allocate for cuslice.io/gpu-compute: "" when accepted, else why not (more than one GPU's
  // compute, or more than any GPU has free).
  std::string allocate_compute(const std::vector<std::string>& ids, Clock::time_point now);
  // PreStartContainer for cuslice.io/gpu-compute, with PodResources asked for at `now`:
  // applies the snapshot (links only), then says whether the container may start.
  StartOutcome start_compute(const std::vector<std::string>& ids, const std::vector<Holding>& holdings,
                             Clock::time_point now);
  // The scheduler refused the tenant's share at its start: its compute counts as none.
  void refuse_compute(const std::string& tenant);
  // Forgets a tenant (its creation in the scheduler failed).
  void forget(const std::string& tenant);
  // Takes back an allocation the scheduler still holds (after the plugin restarted).
  void restore(Allocation allocation);

  // Applies a PodResources snapshot (every container holding IDs of either resource), asked
  // for at `now`. `may_remove` false: links and labels only (the kubelet restarted a moment
  // ago and may not know its pods yet).
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
  uint32_t other_tenants_ = 0;
  AllocationBook allocations_;
  CallPairing pairing_;
  Reconciler reconciler_;
};

}  // namespace cuslice::device_plugin
