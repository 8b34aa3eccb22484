// GetPreferredAllocation: which of the IDs the kubelet offers a container should get. All of
// a container's memory must be on one GPU, where its compute fits too, and the kubelet, which
// knows nothing of GPUs, would otherwise pick IDs across several; Allocate then refuses them
// (allocate_request.h).
//
// Pure choices over the IDs offered, the GPUs known and what the plugin's tenants hold;
// records nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "device_plugin/allocation_book.h"
#include "device_plugin/gpu_table.h"
#include "device_plugin/placement.h"

namespace cuslice::device_plugin {

// `size` memory IDs from `available` (must_include first), all on one GPU: the GPU placement
// chooses (placement.h) for `compute`, the container's compute when known (the compute call
// came first, call_pairing.h). Empty when no single GPU holds the memory (the kubelet then
// picks, and Allocate explains the refusal).
std::vector<std::string> preferred_memory(const GpuTable& gpus, const AllocationBook& book,
                                          const std::vector<std::string>& available,
                                          const std::vector<std::string>& must_include, size_t size,
                                          std::optional<uint32_t> compute, PlacementPolicy policy);
// Compute IDs are not tied to a GPU: must_include, then the lowest of `available`.
std::vector<std::string> preferred_compute(const std::vector<std::string>& available,
                                           const std::vector<std::string>& must_include, size_t size);

}  // namespace cuslice::device_plugin
