// The device IDs the plugin advertises, the resource names they belong to, and memory
// written in the unit a memory ID stands for (gib_text).
//
//   cuslice.io/gpu-memory   one ID per GiB of one GPU's memory: "<GPU UUID>-m<unit>", unit
//                           0, 1, ... (e.g. GPU-5e3c...-m7). `cuslice.io/gpu-memory: 8` in a
//                           pod spec is 8 GiB, and the IDs say on which GPU.
//   cuslice.io/gpu-compute  one ID per percent of a GPU's time, 100 per GPU, not tied to a
//                           GPU: "c<n>" (c0 ... c799 on 8 GPUs). `cuslice.io/gpu-compute: 30`
//                           is 30% of whichever GPU the container's memory is on.
//
// The UUID, not the GPU's index, names memory: indices can change when a node reboots with a
// card more or less, and the kubelet keeps IDs in its checkpoint across reboots. Every ID is
// at most 63 characters, the kubelet's limit (a UUID is 40).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cuslice::device_plugin {

inline constexpr const char* kMemoryResource = "cuslice.io/gpu-memory";
inline constexpr const char* kComputeResource = "cuslice.io/gpu-compute";
inline constexpr uint64_t kMemoryUnit = uint64_t{1} << 30;  // one memory ID
inline constexpr uint32_t kComputePerGpu = 100;             // compute IDs per GPU

struct MemoryId {
  std::string gpu_uuid;
  uint32_t unit = 0;
};

std::string memory_id(std::string_view gpu_uuid, uint32_t unit);
// nullopt when `id` is not a memory ID ("<something>-m<digits>").
std::optional<MemoryId> parse_memory_id(std::string_view id);

std::string compute_id(uint32_t n);
std::optional<uint32_t> parse_compute_id(std::string_view id);

// "16 GiB", "1.5 GiB": memory as the plugin's messages write it.
std::string gib_text(uint64_t bytes);

}  // namespace cuslice::device_plugin
