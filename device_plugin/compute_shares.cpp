// Tenants' shares and caps (compute_shares.h).
#include "compute_shares.h"

#include <algorithm>

#include "ppm.h"

namespace cuslice::device_plugin {

uint32_t share_ppm(const Allocation& allocation, const AllocationBook& book) {
  if (allocation.compute_percent > 0) return std::min(allocation.compute_percent * kPpmPerPercent, kPpmWhole);
  uint32_t explicit_ppm = 0, without = 0;
  for (const auto& [name, a] : book.all()) {
    if (a.tenant.empty() || a.gpu != allocation.gpu) continue;
    if (a.compute_percent > 0) explicit_ppm += a.compute_percent * kPpmPerPercent;
    else ++without;
  }
  const uint32_t left = explicit_ppm < kPpmWhole ? kPpmWhole - explicit_ppm : 0;
  return std::max(left / std::max(without, uint32_t{1}), kPpmPerPercent);
}

uint32_t limit_ppm(const Allocation& allocation, const AllocationBook& book, bool cap_compute) {
  return cap_compute && allocation.compute_percent > 0 ? share_ppm(allocation, book) : kPpmWhole;
}

}  // namespace cuslice::device_plugin
