// The node's GPUs, as NVML reports them: index, UUID, name, memory, compute capability and
// device node. Shared by the device plugin and the DRA driver; knows nothing of either.
//
// libnvidia-ml.so.1 is opened at run time (nvml/nvml_library.h), not linked: the plugin then
// starts, and says why it sees no GPU, on a node whose driver is missing or broken, and tests
// put the project's fake NVML first on LD_LIBRARY_PATH. Not thread-safe: one owner (the
// plugin's control loop) asks.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cuslice::node {

struct GpuInfo {
  uint32_t index = 0;
  std::string uuid;
  std::string name;
  uint64_t memory_total = 0;
  std::optional<uint32_t> minor;  // /dev/nvidia<minor>; unknown when NVML cannot say
  // CUDA compute capability (9.0 for an H100); unknown when NVML cannot say.
  std::optional<std::pair<int, int>> compute_capability;
};

class GpuInventory {
 public:
  // Opens and initialises NVML; nullptr with `why` set when it cannot.
  static std::unique_ptr<GpuInventory> open(std::string& why);
  ~GpuInventory();
  GpuInventory(const GpuInventory&) = delete;
  GpuInventory& operator=(const GpuInventory&) = delete;

  // Every GPU NVML reports now; one that does not answer (fell off the bus) is left out, and
  // `problems` says why. nullopt when NVML itself fails.
  std::optional<std::vector<GpuInfo>> list(std::vector<std::string>& problems) const;
  std::string driver_version() const;

 private:
  struct Api;
  explicit GpuInventory(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

}  // namespace cuslice::node
