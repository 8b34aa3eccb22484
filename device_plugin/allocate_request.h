// What a kubelet Allocate call's device IDs mean. Memory IDs must name units of one present
// GPU, each once: they become a new allocation (a tenant to make), or the same one again when
// the kubelet repeats a call; anything else is refused with a message that names the request
// and each GPU's free memory, since the kubelet shows it to the pod's owner. Compute IDs must
// be at most one GPU's (100) and fit in some GPU's free compute; they are not tied to a GPU,
// and are the share of whatever GPU the container's memory is on. Each call is paired with
// the same container's other one when it can be (call_pairing.h): the allocation then counts
// that compute on its GPU at once, for the placements that follow.
//
// Records the allocation; never talks to the kubelet or the scheduler (device_plugin.cpp
// does, with what this returns).
#pragma once

#include <string>
#include <vector>

#include "device_plugin/allocation_book.h"
#include "device_plugin/call_pairing.h"
#include "device_plugin/gpu_table.h"

namespace cuslice::device_plugin {

struct MemoryOutcome {
  const Allocation* allocation = nullptr;  // null: refused, `error` says why
  bool created = false;                    // false: the same IDs were allocated before
  std::string error;
};

// Allocate for cuslice.io/gpu-memory. `fresh_tenant`/`fresh_key` name the tenant if one is
// made; it takes the compute of the compute call just before when that pairs and fits.
MemoryOutcome allocate_memory(const GpuTable& gpus, AllocationBook& book, CallPairing& pairing,
                              const std::vector<std::string>& ids, Clock::time_point now,
                              const std::string& fresh_tenant, const std::string& fresh_key);
// Allocate for cuslice.io/gpu-compute: "" when accepted, else why not (IDs this node does not
// advertise, more than one GPU's, more than any GPU has free). Pairs it with the memory call
// just before when the compute fits that allocation's GPU.
std::string allocate_compute(const GpuTable& gpus, AllocationBook& book, CallPairing& pairing,
                             const std::vector<std::string>& ids, Clock::time_point now);

}  // namespace cuslice::device_plugin
