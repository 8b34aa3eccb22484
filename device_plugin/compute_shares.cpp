// Tenants' shares and caps (compute_shares.h).
#include "device_plugin/compute_shares.h"

#include <algorithm>

#include "device_plugin/compute_room.h"
#include "protocol/ppm.h"

namespace cuslice::device_plugin {

uint32_t share_ppm(const Allocation& allocation, const AllocationBook&) {
  return std::min(counted_percent(allocation) * kPpmPerPercent, kPpmWhole);
}

uint32_t limit_ppm(const Allocation& allocation, const AllocationBook& book, bool cap_compute) {
  return cap_compute && counted_percent(allocation) > 0 ? share_ppm(allocation, book) : kPpmWhole;
}

}  // namespace cuslice::device_plugin
