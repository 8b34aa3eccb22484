// GetPreferredAllocation: which of the IDs the kubelet offers a container should get. All of
// a container's memory must be on one GPU, and the kubelet, which knows nothing of GPUs,
// would otherwise pick IDs across several; Allocate then refuses them (allocate_request.h).
//
// Pure choices over the IDs offered and the GPUs known; records nothing.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "gpu_table.h"

namespace cuslice::device_plugin {

// `size` memory IDs from `available` (must_include first), all on one GPU: the GPU with the
// least room that fits (keeping large holes for large requests), the lower index on a tie.
// Empty when no single GPU can (the kubelet then picks, and Allocate explains the refusal).
std::vector<std::string> preferred_memory(const GpuTable& gpus, const std::vector<std::string>& available,
                                          const std::vector<std::string>& must_include, size_t size);
// Compute IDs are not tied to a GPU: must_include, then the lowest of `available`.
std::vector<std::string> preferred_compute(const std::vector<std::string>& available,
                                           const std::vector<std::string>& must_include, size_t size);

}  // namespace cuslice::device_plugin
