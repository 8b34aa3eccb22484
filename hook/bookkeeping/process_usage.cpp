// Reads NVML's list of a device's compute processes (process_usage.h). Slow paths only; may
// call driver and gpu_uuid.
#include "hook/bookkeeping/process_usage.h"

#include <unistd.h>

#include <cstdio>

#include "hook/base/gpu_uuid.h"
#include "hook/driver/driver.h"

namespace cuslice::process_usage {
namespace {

using GetUuid = CUresult (*)(CUuuid*, CUdevice);
using ByUuid = nvmlReturn_t (*)(const char*, nvmlDevice_t*);
using Procs = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*);
using Init = nvmlReturn_t (*)();

// NVML names devices by UUID ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"); CUDA by ordinal.
bool nvml_device(int device, nvmlDevice_t* out) {
  auto get_uuid = reinterpret_cast<GetUuid>(cuda_symbol("cuDeviceGetUuid_v2"));
  auto by_uuid = reinterpret_cast<ByUuid>(nvml_symbol("nvmlDeviceGetHandleByUUID"));
  if (get_uuid == nullptr || by_uuid == nullptr) return false;
  CUuuid u;
  if (get_uuid(&u, device) != CUDA_SUCCESS) return false;
  char text[kGpuUuidText];
    format_gpu_uuid(u, text);
  return by_uuid(text, out) == NVML_SUCCESS;
}

bool initialised() {
  static const bool done = [] {
    auto init = reinterpret_cast<Init>(nvml_symbol("nvmlInit_v2"));
    return init != nullptr && init() == NVML_SUCCESS;
  }();
  return done;
}

// The device's compute processes, as NVML lists them (at most `max`).
bool list(int device, nvmlProcessInfo_t* info, unsigned int max, unsigned int* count) {
  if (!initialised()) return false;
  auto procs = reinterpret_cast<Procs>(nvml_symbol("nvmlDeviceGetComputeRunningProcesses_v3"));
  nvmlDevice_t dev;
  if (procs == nullptr || !nvml_device(device, &dev)) return false;
  *count = max;
  return procs(dev, count, info) == NVML_SUCCESS;
}

}  // namespace

bool device_processes(int device, Usage* out, unsigned max, unsigned* count) {
  // One call (a GPU with more processes than this answers "insufficient size": false).
  static constexpr unsigned kBatch = 256;
  nvmlProcessInfo_t info[kBatch];
  unsigned int n = 0;
  if (!list(device, info, max < kBatch ? max : kBatch, &n)) return false;
  *count = 0;
  for (unsigned int i = 0; i < n && *count < max; ++i)
    if (info[i].usedGpuMemory != ~0ull) out[(*count)++] = {info[i].pid, info[i].usedGpuMemory};
  return true;
}

bool device_bytes(int device, uint64_t* bytes) {
  nvmlProcessInfo_t info[256];
  unsigned int count = 0;
  if (!list(device, info, 256, &count)) return false;
  const unsigned int self = static_cast<unsigned int>(getpid());
  for (unsigned int i = 0; i < count; ++i) {
    if (info[i].pid == self) {
      // NVML reports "not available" as ~0ull (e.g. without permission).
      if (info[i].usedGpuMemory == ~0ull) return false;
      *bytes = info[i].usedGpuMemory;
      return true;
    }
  }
  return false;
}

}  // namespace cuslice::process_usage
