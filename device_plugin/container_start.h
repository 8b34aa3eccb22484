// Whether a container that holds cuslice.io/gpu-compute may start: the kubelet's
// PreStartContainer call for that resource, the first moment the plugin knows for sure what
// the container holds (the kubelet has recorded both its Allocate answers, and PodResources
// lists them). Allocate cannot know: the kubelet asks for each resource separately, and a
// compute call looks the same whether a memory call follows it or not (call_pairing.h).
//
//   1. A container holding compute but no cuslice.io/gpu-memory is refused: compute is a
//      share of the GPU its memory is on, and it has none.
//   2. A container whose compute does not fit the free compute of its memory's GPU (the other
//      tenants there, compute_room.h) is refused, and counts as one without compute until a
//      later start finds room: the kubelet tries again, with a back-off, until the pod goes.
//   3. Otherwise it starts, with its share.
// A container PodResources does not list, or that holds memory no tenant of the plugin
// covers, starts: nothing here can be checked, and the next look at PodResources links it.
//
// Changes the allocation record only (the refusal mark); the caller has applied the snapshot
// (reconciliation.h) and sends the tenant's share to the scheduler.
#pragma once

#include <string>
#include <vector>

#include "device_plugin/allocation_book.h"
#include "device_plugin/reconciliation.h"

namespace cuslice::device_plugin {

struct StartOutcome {
  std::string error;   // non-empty: refused, and why (the kubelet shows it on the pod)
  std::string tenant;  // the container's tenant when the plugin has one: its share is due now
};

// The container holding exactly `compute_ids` of compute in `holdings`; null when none does.
const Holding* holder_of(const std::vector<Holding>& holdings, const std::vector<std::string>& compute_ids);

// `compute_ids`: the IDs of PreStartContainer's request; `holdings`: PodResources now.
StartOutcome check_start(AllocationBook& book, const std::vector<std::string>& compute_ids,
                         const std::vector<Holding>& holdings);

}  // namespace cuslice::device_plugin
