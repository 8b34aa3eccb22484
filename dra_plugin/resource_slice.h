// The node's ResourceSlice (resource.k8s.io/v1) as the DRA driver publishes it: one device per
// GPU, which several claims may share (allowMultipleAllocations), with its attributes and two
// capacities each claim consumes a part of:
//   memory   bytes: the GPU's memory less --reserve-memory, rounded down to the step; a claim
//            takes a multiple of the step (256 MiB by default), the whole by default;
//   compute  percent of the GPU's time under contention: 1 to 100, 100 by default.
// kube-scheduler adds up what the claims on a device consumed and places a claim only where
// its amounts fit; the driver then makes each claim a tenant with exactly those amounts.
//
// Pure: GPUs in, JSON out; the publisher (slice_publisher.h) writes it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "node/gpu_inventory.h"

namespace cuslice::dra {

inline constexpr const char* kDriverName = "gpu.cuslice.io";
inline constexpr const char* kResourceApi = "/apis/resource.k8s.io/v1";
inline constexpr const char* kMemoryCapacity = "memory";
inline constexpr const char* kComputeCapacity = "compute";

struct SliceOptions {
  std::string node;                        // the node's name: pool, nodeName
  uint64_t reserve_memory = 0;             // bytes per GPU never handed out
  uint64_t memory_step = uint64_t{256} << 20;
  std::string driver_version;              // NVML's, e.g. "570.124.06"; empty when unknown
};

// "gpu-<index>", and back; nullopt for a name that is not one.
std::string device_name(uint32_t index);
std::optional<uint32_t> device_index(std::string_view name);

// The memory capacity of a GPU with `total` bytes: total - reserve, rounded down to the step.
uint64_t memory_capacity(uint64_t total, const SliceOptions& options);

// "volta", "turing", "ampere", "ada-lovelace", "hopper", "blackwell", or "" when unknown.
std::string architecture(std::pair<int, int> compute_capability);

// A version string as the API's "version" attribute takes it (semantic versioning, no leading
// zeros): "570.124.06" -> "570.124.6"; nullopt when it is not one to three numbers.
std::optional<std::string> semantic_version(std::string_view text);

// The slice's name on the API server (one per node).
std::string slice_name(const std::string& node);

// The slice's spec for these GPUs; `pool_generation` goes into spec.pool.generation. No GPU
// (none found, or the scheduler is away and nothing could be enforced): no device. Each
// device's `mode` attribute says how its tenants share it: "spatial" (bit g of
// `spatial_gpus`: side by side, docs/design/spatial.md) or "time-sliced", for a claim's CEL
// selector (`device.attributes["gpu.cuslice.io"].mode == "spatial"`).
nlohmann::json slice_spec(const SliceOptions& options, const std::vector<node::GpuInfo>& gpus,
                          int64_t pool_generation, uint32_t spatial_gpus = 0);

}  // namespace cuslice::dra
