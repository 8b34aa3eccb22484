// NVML, as nvidia-smi and pynvml read it inside a process under a quota: the quota is the
// card's memory.
#include <cstdio>
#include <cstring>

#include "hook/base/gpu_uuid.h"
#include "hook/base/settings.h"
#include "hook/driver/driver.h"
#include "hook/entry/process_visibility.h"
#include "hook/memory/quota.h"

using namespace cuslice;

namespace {

using GetUuidNvml = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
using GetUuidCuda = CUresult (*)(CUuuid*, CUdevice);
using GetCount = CUresult (*)(int*);

bool same_limit_everywhere() {
  const Settings& s = settings();
  for (int d = 1; d < kMaxDevices; ++d) {
    if (s.has_limit[d] != s.has_limit[0]) return false;
    if (s.limit[d].kind != s.limit[0].kind || s.limit[d].bytes != s.limit[0].bytes ||
        s.limit[d].percent != s.limit[0].percent)
      return false;
  }
  return true;
}

// The CUDA ordinal of an NVML device (they are numbered differently), matched by UUID; -1
// if CUDA cannot say (CUDA is initialised for this if the process has not done so).
int cuda_ordinal(nvmlDevice_t device) {
  auto nvml_uuid = reinterpret_cast<GetUuidNvml>(nvml_symbol("nvmlDeviceGetUUID"));
  auto cuda_uuid = reinterpret_cast<GetUuidCuda>(cuda_symbol("cuDeviceGetUuid_v2"));
  auto count = reinterpret_cast<GetCount>(cuda_symbol("cuDeviceGetCount"));
  auto init = real<Sym::cuInit>();
  char want[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
  if (!nvml_uuid || !cuda_uuid || !count || !init || nvml_uuid(device, want, sizeof want) != NVML_SUCCESS)
    return -1;
  int n = 0;
  if (count(&n) != CUDA_SUCCESS && (init(0) != CUDA_SUCCESS || count(&n) != CUDA_SUCCESS)) return -1;
  for (int d = 0; d < n && d < kMaxDevices; ++d) {
    CUuuid u;
    if (cuda_uuid(&u, d) != CUDA_SUCCESS) continue;
    char text[kGpuUuidText];
    format_gpu_uuid(u, text);
    if (std::strcmp(text, want) == 0) return d;
  }
  return -1;
}

// Applies the quota to a device's figures: total becomes the quota; used is what this
// process is charged if it uses the device through CUDA, else the device's use capped.
bool apply(nvmlDevice_t device, unsigned long long* total, unsigned long long* used,
           unsigned long long* free) {
  if (!cuda_ready() || !quota::active()) return false;
  const Settings& s = settings();
  int ordinal = same_limit_everywhere() ? -1 : cuda_ordinal(device);
  if (ordinal < 0 && quota::single_device()) ordinal = 0;
  uint64_t lim = 0, mine = *used;
  if (ordinal >= 0 && quota::accounted(ordinal)) {
    // This process uses the device through CUDA: what its CUDA view shows (its quota, or
    // its tenant's, and what counts against it).
    const quota::View v = quota::view(ordinal);
    if (v.total == quota::kUnlimited) return false;
    lim = v.total;
    if (v.used > 0) mine = v.used;
  } else {
    // nvidia-smi and other NVML-only readers: the same spec against NVML's total.
    const int spec = ordinal >= 0 ? ordinal : 0;
    if (!s.has_limit[spec]) return false;
    lim = s.limit[spec].resolve(*total);
  }
  if (lim > *total) lim = *total;
  if (mine > lim) mine = lim;
  *total = lim;
  *used = mine;
  *free = lim - mine;
  return true;
}

// Drops the processes this one may not see from a list NVML filled (in place). Normally the
// RM control underneath was filtered already (rm_control_hooks.cpp); this holds without it.
template <typename Info>
nvmlReturn_t filter(nvmlReturn_t r, unsigned int* count, Info* infos) {
  if (r != NVML_SUCCESS || count == nullptr || infos == nullptr || !process_visibility::filtered()) return r;
  unsigned int kept = 0;
  for (unsigned int i = 0; i < *count; ++i)
    if (process_visibility::visible(infos[i].pid)) infos[kept++] = infos[i];
  *count = kept;
  return r;
}

}  // namespace

extern "C" {

// Under a quota a process sees its own tenant's processes on the GPU, not other tenants'
// pids or usage. (A count asked for with a too-small buffer still counts them all: the
// caller only learns how much room to make.)
CUSLICE_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                                    nvmlProcessInfo_t* infos) {
  auto fn = real<Sym::nvmlDeviceGetComputeRunningProcesses_v3>();
  if (fn == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  return filter(fn(device, count, infos), count, infos);
}

CUSLICE_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int* count,
                                                                 nvmlProcessInfo_v1_t* infos) {
  auto fn = real<Sym::nvmlDeviceGetComputeRunningProcesses>();
  if (fn == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  return filter(fn(device, count, infos), count, infos);
}

CUSLICE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  auto fn = real<Sym::nvmlDeviceGetMemoryInfo>();
  if (fn == nullptr) return NVML_ERROR_UNINITIALIZED;
  const nvmlReturn_t r = fn(device, memory);
  if (r == NVML_SUCCESS && memory != nullptr) apply(device, &memory->total, &memory->used, &memory->free);
  return r;
}

CUSLICE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  auto fn = real<Sym::nvmlDeviceGetMemoryInfo_v2>();
  if (fn == nullptr) return NVML_ERROR_UNINITIALIZED;
  const nvmlReturn_t r = fn(device, memory);
  if (r == NVML_SUCCESS && memory != nullptr) {
    unsigned long long total = memory->total;
    if (apply(device, &total, &memory->used, &memory->free)) {
      // v2 splits total into reserved + used + free; the quota has no driver reserve.
      memory->total = total;
      memory->reserved = 0;
    }
  }
  return r;
}

}  // extern "C"
