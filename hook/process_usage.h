// The device memory the driver itself attributes to this process (what
// `nvidia-smi --query-compute-apps` shows), read through NVML. The hook's measure of what no
// allocation call reveals: the context, lazily loaded modules, local memory. Slow path only.
#pragma once

#include <cstdint>

namespace cuslice::process_usage {

// Bytes this process holds on CUDA device `device`; false when NVML cannot tell (no NVML, or
// the process is not visible to it, e.g. inside a PID namespace).
bool device_bytes(int device, uint64_t* bytes);

}  // namespace cuslice::process_usage
