// A GPU's UUID as NVML spells it ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"): how the hook
// matches CUDA's device ordinals (cuDeviceGetUuid) to NVML's devices.
#pragma once

#include <cstdio>

#include "hook/base/cuda_api.h"

namespace cuslice {

inline constexpr size_t kGpuUuidText = 48;

inline void format_gpu_uuid(const CUuuid& u, char (&out)[kGpuUuidText]) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  std::snprintf(out, sizeof out, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
}

}  // namespace cuslice
