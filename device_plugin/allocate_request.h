// What a kubelet Allocate call's device IDs mean. Memory IDs must name units of one present
// GPU, each once: they become a new allocation (a tenant to make), or the same one again when
// the kubelet repeats a call; anything else is refused with a message that names the request
// and each GPU's free memory, since the kubelet shows it to the pod's owner. Compute IDs are
// only checked: compute is a share of whatever GPU the container's memory is on, which this
// call cannot know (ledger.h, steps 1 and 2).
//
// Records the allocation; never talks to the kubelet or the scheduler (device_plugin.cpp
// does, with what this returns).
#pragma once

#include <string>
#include <vector>

#include "allocation_book.h"
#include "gpu_table.h"

namespace cuslice::device_plugin {

struct MemoryOutcome {
  const Allocation* allocation = nullptr;  // null: refused, `error` says why
  bool created = false;                    // false: the same IDs were allocated before
  std::string error;
};

// Allocate for cuslice.io/gpu-memory. `fresh_tenant`/`fresh_key` name the tenant if one is
// made.
MemoryOutcome allocate_memory(const GpuTable& gpus, AllocationBook& book, const std::vector<std::string>& ids,
                              Clock::time_point now, const std::string& fresh_tenant, const std::string& fresh_key);
// Allocate for cuslice.io/gpu-compute: "" when the IDs are compute IDs of this node, else why not.
std::string check_compute(const GpuTable& gpus, const std::vector<std::string>& ids);

}  // namespace cuslice::device_plugin
