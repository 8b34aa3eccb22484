// What compute is promised on each GPU, from the allocation record, and so what is still free
// there. A container whose compute is known (its compute call paired with its memory call,
// or PodResources showed it) counts its percent; a container without (it asked for memory
// only, or its compute is not known yet) counts 1%, the least share it is given, so that the
// shares on a GPU never add up to more than 100% (compute_shares.h). A container refused at
// start (container_start.h) counts as one without: it runs nothing.
//
// Reads the allocation record only; changes nothing. Placement (placement.h), Allocate's
// checks (allocate_request.h), the start check and the advertised devices read it.
#pragma once

#include <cstdint>
#include <string_view>

#include "device_plugin/allocation_book.h"

namespace cuslice::device_plugin {

inline constexpr uint32_t kWholeGpuPercent = 100;
// What a container without compute of its own keeps back on its GPU: its least share.
inline constexpr uint32_t kMemoryOnlyPercent = 1;

struct GpuCompute {
  uint32_t promised = 0;     // percent, of the containers whose compute counts
  uint32_t memory_only = 0;  // containers without compute that counts
  // Percent a further container with compute may still take.
  uint32_t free() const;
};

// The percent `allocation` counts on its GPU; 0: none (it counts as memory only).
uint32_t counted_percent(const Allocation& allocation);

// What the plugin's tenants on `gpu` hold, leaving out the allocation named `except` (the
// one being decided). Adopted allocations have no tenant and are not scheduled: not counted.
GpuCompute compute_on(const AllocationBook& book, uint32_t gpu, std::string_view except = {});

}  // namespace cuslice::device_plugin
