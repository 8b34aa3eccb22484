// The GPUs the device plugin knows: what NVML reported, which are still present, how much of
// each is held back from pods, and so how many GiB units each can hand out. A GPU NVML stops
// reporting stays known, not present, so that its IDs are listed unhealthy rather than
// vanish while pods may still hold them.
//
// Knows nothing of allocations or of the kubelet; the ledger (ledger.h) feeds it NVML's list
// and the scheduler's held-back bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cuslice::device_plugin {

// One GPU as the plugin knows it.
struct Gpu {
  uint32_t index = 0;          // NVML's index on the node: the scheduler's GPU number
  std::string uuid;            // "GPU-xxxxxxxx-..."
  uint64_t memory_total = 0;   // bytes, from NVML
  uint64_t held_back = 0;      // bytes not handed out (--reserve-memory, ConfigMap tenants' quotas)
  bool present = true;         // NVML still reports it; false: its IDs are unhealthy
};

class GpuTable {
 public:
  // `max_units`: the most GiB units advertised per GPU (LedgerOptions::max_units).
  explicit GpuTable(uint32_t max_units) : max_units_(max_units) {}

  // The GPUs NVML reports now. A GPU known before and missing now stays, not present; one
  // known before keeps its held-back bytes.
  void set(const std::vector<Gpu>& gpus);
  void set_held_back(uint32_t gpu, uint64_t bytes);

  const std::vector<Gpu>& all() const { return gpus_; }
  const Gpu* by_uuid(const std::string& uuid) const;
  const Gpu* by_index(uint32_t index) const;

  // GiB the GPU can hand out: (memory - held back) / 1 GiB, rounded down, at most max_units.
  uint32_t capacity_units(const Gpu& gpu) const;

 private:
  uint32_t max_units_;
  std::vector<Gpu> gpus_;  // by index
};

}  // namespace cuslice::device_plugin
