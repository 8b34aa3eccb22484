// Compute promised per GPU (compute_room.h).
#include "device_plugin/compute_room.h"

namespace cuslice::device_plugin {

uint32_t GpuCompute::free() const {
  const uint64_t held = uint64_t{promised} + uint64_t{memory_only} * kMemoryOnlyPercent;
  return held >= kWholeGpuPercent ? 0 : kWholeGpuPercent - static_cast<uint32_t>(held);
}

uint32_t counted_percent(const Allocation& a) { return a.compute_refused ? 0 : a.compute_percent; }

GpuCompute compute_on(const AllocationBook& book, uint32_t gpu, std::string_view except) {
  GpuCompute out;
  for (const auto& [name, a] : book.all()) {
    if (a.tenant.empty() || a.gpu != gpu || name == except) continue;
    const uint32_t percent = counted_percent(a);
    if (percent > 0) out.promised += percent;
    else ++out.memory_only;
  }
  return out;
}

}  // namespace cuslice::device_plugin
