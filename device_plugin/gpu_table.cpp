// The GPUs the plugin knows (gpu_table.h).
#include "device_plugin/gpu_table.h"

#include <algorithm>

#include "device_plugin/device_ids.h"

namespace cuslice::device_plugin {

void GpuTable::set(const std::vector<Gpu>& gpus) {
  for (Gpu& known : gpus_) known.present = false;
  for (const Gpu& g : gpus) {
    auto it = std::find_if(gpus_.begin(), gpus_.end(), [&](const Gpu& k) { return k.uuid == g.uuid; });
    if (it == gpus_.end()) {
      gpus_.push_back(g);
      gpus_.back().present = true;
      continue;
    }
    // What is held back comes from the scheduler, not NVML: NVML's report must not reset it.
    const uint64_t held_back = it->held_back;
    *it = g;
    it->held_back = held_back;
    it->present = true;
  }
  std::sort(gpus_.begin(), gpus_.end(), [](const Gpu& a, const Gpu& b) { return a.index < b.index; });
}

void GpuTable::set_held_back(uint32_t gpu, uint64_t bytes) {
  for (Gpu& g : gpus_)
    if (g.index == gpu) g.held_back = bytes;
}

const Gpu* GpuTable::by_uuid(const std::string& uuid) const {
  for (const Gpu& g : gpus_)
    if (g.uuid == uuid) return &g;
  return nullptr;
}

const Gpu* GpuTable::by_index(uint32_t index) const {
  for (const Gpu& g : gpus_)
    if (g.index == index) return &g;
  return nullptr;
}

uint32_t GpuTable::capacity_units(const Gpu& gpu) const {
  const uint64_t usable = gpu.memory_total > gpu.held_back ? gpu.memory_total - gpu.held_back : 0;
  return static_cast<uint32_t>(std::min<uint64_t>(usable / kMemoryUnit, max_units_));
}

}  // namespace cuslice::device_plugin
