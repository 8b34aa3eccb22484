// What ListAndWatch advertises for each resource: every device ID and whether it is healthy.
// An ID is healthy only while its GPU is present and the scheduler answers: the kubelet then
// admits no pod whose tenant could not be made.
//
// The node never advertises more containers than it can take. kube-scheduler and the kubelet
// count devices, and a container takes at least one memory unit, so the free memory units
// advertised healthy are at most the tenants the scheduler can still hold (its 64 less those
// it has: the configuration file's and the plugin's), and a GPU whose compute is all promised
// (compute_room.h) advertises none of its free units. Which free units stay healthy when
// that bites follows the placement policy (advertised_free). Units held by containers stay
// healthy (the kubelet counts them as allocated).
//
// Reads the GPUs and the allocation record; changes nothing, and knows nothing of the
// kubelet's messages (device_plugin.cpp turns these into them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device_plugin/allocation_book.h"
#include "device_plugin/gpu_table.h"
#include "device_plugin/placement.h"

namespace cuslice::device_plugin {

struct Device {
  std::string id;
  bool healthy = false;
  bool operator==(const Device&) const = default;
};

struct AdvertiseLimits {
  uint32_t tenant_room = 0;  // tenants the scheduler can still hold
  PlacementPolicy policy = PlacementPolicy::kBinpack;
};

// Memory: every unit below each GPU's capacity; a unit still held above a capacity that
// shrank (a ConfigMap tenant got a quota) is listed, healthy, until it is given back.
std::vector<Device> memory_devices(const GpuTable& gpus, const AllocationBook& book, bool scheduler_reachable,
                                   const AdvertiseLimits& limits);
// Compute: 100 per GPU known, those of an absent GPU unhealthy.
std::vector<Device> compute_devices(const GpuTable& gpus, bool scheduler_reachable);

// How many of each GPU's `free` units are advertised healthy, `budget` in all. While the
// free units add up to no more, all of them. Otherwise spread takes from the GPUs with the
// most free first, down to one level for all, so that every GPU stays a choice; binpack gives
// each GPU a floor (a quarter of the budget over two GPUs, an eighth over four), then keeps
// whole the GPU it fills next (the least free) and the one a large request needs (the most
// free), as far as the budget goes, and levels the others with the rest.
std::vector<uint32_t> advertised_free(const std::vector<uint32_t>& free, uint32_t budget, PlacementPolicy policy);

}  // namespace cuslice::device_plugin
