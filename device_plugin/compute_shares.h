// A tenant's share of its GPU and its cap, in millionths (ppm) of the GPU.
//
// The share: its compute IDs in percent when it has some, else an equal part of what the
// compute of the other tenants on its GPU leaves (at least 1%), so that a container that
// asked only for memory still runs, and runs alone at full speed (shares are weights under
// contention, not caps). Compute IDs exist 100 per GPU but are not tied to one, so the
// percentages on one GPU may add up to more than 100; the scheduler then divides the GPU in
// proportion to them. The cap is the share with --cap-compute (HAMi's gpucores), else none.
//
// Reads the allocation record only; changes nothing.
#pragma once

#include <cstdint>

#include "allocation_book.h"

namespace cuslice::device_plugin {

uint32_t share_ppm(const Allocation& allocation, const AllocationBook& book);
// `cap_compute`: LedgerOptions::cap_compute.
uint32_t limit_ppm(const Allocation& allocation, const AllocationBook& book, bool cap_compute);

}  // namespace cuslice::device_plugin
