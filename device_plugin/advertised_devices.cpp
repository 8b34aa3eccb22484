// The device lists ListAndWatch advertises (advertised_devices.h).
#include "advertised_devices.h"

#include <algorithm>

#include "device_ids.h"

namespace cuslice::device_plugin {

std::vector<Device> memory_devices(const GpuTable& gpus, const AllocationBook& book, bool scheduler_reachable) {
  std::vector<Device> out;
  for (const Gpu& g : gpus.all()) {
    const uint32_t capacity = gpus.capacity_units(g);
    const std::set<uint32_t> used = book.used_units(g.index);
    uint32_t listed = capacity;
    if (!used.empty()) listed = std::max(listed, *used.rbegin() + 1);
    const bool usable = g.present && scheduler_reachable;
    for (uint32_t u = 0; u < listed; ++u)
      out.push_back({memory_id(g.uuid, u), usable && (u < capacity || used.count(u) > 0)});
  }
  return out;
}

std::vector<Device> compute_devices(const GpuTable& gpus, bool scheduler_reachable) {
  std::vector<Device> out;
  uint32_t n = 0;
  for (const Gpu& g : gpus.all())
    for (uint32_t i = 0; i < kComputePerGpu; ++i) out.push_back({compute_id(n++), g.present && scheduler_reachable});
  return out;
}

}  // namespace cuslice::device_plugin
