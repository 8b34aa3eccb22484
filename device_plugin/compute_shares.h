// A tenant's share of its GPU and its cap, in millionths (ppm) of the GPU.
//
// The share: its compute in percent when it counts (compute_room.h), else 0, which the
// scheduler reads as an equal part of what the explicit shares of the tenants on its GPU
// leave (at least 1%), so that a container that asked only for memory (or whose compute is
// not known yet, or was refused at start) still runs, and runs alone at full speed (shares
// are weights under contention, not caps). The scheduler refuses a tenant whose share does
// not fit its GPU beside the others there; placement (placement.h) keeps within that. The cap
// is the share with --cap-compute (HAMi's gpucores), else none.
//
// Reads the allocation record only; changes nothing.
#pragma once

#include <cstdint>

#include "device_plugin/allocation_book.h"

namespace cuslice::device_plugin {

uint32_t share_ppm(const Allocation& allocation, const AllocationBook& book);
// `cap_compute`: LedgerOptions::cap_compute.
uint32_t limit_ppm(const Allocation& allocation, const AllocationBook& book, bool cap_compute);

}  // namespace cuslice::device_plugin
