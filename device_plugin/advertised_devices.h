// What ListAndWatch advertises for each resource: every device ID and whether it is healthy.
// An ID is healthy only while its GPU is present and the scheduler answers: the kubelet then
// admits no pod whose tenant could not be made.
//
// Reads the GPUs and the allocation record; changes nothing, and knows nothing of the
// kubelet's messages (device_plugin.cpp turns these into them).
#pragma once

#include <string>
#include <vector>

#include "allocation_book.h"
#include "gpu_table.h"

namespace cuslice::device_plugin {

struct Device {
  std::string id;
  bool healthy = false;
  bool operator==(const Device&) const = default;
};

// Memory: every unit below each GPU's capacity; a unit still held above a capacity that
// shrank (a ConfigMap tenant got a quota) is listed, healthy, until it is given back.
std::vector<Device> memory_devices(const GpuTable& gpus, const AllocationBook& book, bool scheduler_reachable);
// Compute: 100 per GPU known, those of an absent GPU unhealthy.
std::vector<Device> compute_devices(const GpuTable& gpus, bool scheduler_reachable);

}  // namespace cuslice::device_plugin
