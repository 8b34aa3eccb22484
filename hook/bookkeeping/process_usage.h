// The device memory the driver itself attributes to this process (what
// `nvidia-smi --query-compute-apps` shows), read through NVML. The hook's measure of what no
// allocation call reveals: the context, lazily loaded modules, local memory; and, for a
// tenant's reconciliation, what each of the GPU's processes holds. Slow paths only.
#pragma once

#include <cstdint>

namespace cuslice::process_usage {

// Bytes this process holds on CUDA device `device`; false when NVML cannot tell (no NVML, or
// the process is not visible to it, e.g. inside a PID namespace).
bool device_bytes(int device, uint64_t* bytes);

// Every process NVML lists on `device` with what it holds (pids as NVML reports them: the
// caller's pid namespace), at most `max`, in the caller's buffer; *count is how many. False
// when NVML cannot tell. Entries whose figure NVML does not know are left out.
struct Usage {
  uint32_t pid;
  uint64_t bytes;
};
bool device_processes(int device, Usage* out, unsigned max, unsigned* count);

}  // namespace cuslice::process_usage
