// The fake libnvidia-ml.so.1: NVML's view of the fake driver's devices. It reads the device state
// through the fake_cuda_* control API only (never through cu* entry points, which an interposer
// would see), so it works without cuInit, and a process without a context holds 0 bytes.
//
// Memory: total = device size, used = what this process holds, free = total - used; the v2 struct
// reports reserved = 0. Processes: this process while it holds memory on the device, or every
// process holding memory on it (FAKE_NVML_DEVICE_PROCESSES=1).
#include <unistd.h>

#include <cstdlib>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <iterator>

#include "hook/base/nvml_api.h"
#include "tests/fake_driver/cuda/knobs.h"
#include "tests/fake_driver/fake_cuda_control.h"

// Handles are the addresses of these; NVML defines nothing inside, and neither does the fake.
struct nvmlDevice_st {
  int index;
};

namespace {

constexpr unsigned int kNoMigInstance = 0xFFFFFFFF;
constexpr unsigned int kMaxListed = 160;  // the shared device's rows (128) and a few others

nvmlDevice_st devices[] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7},
                           {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}};
static_assert(std::size(devices) == fake_cuda::kMaxDevices, "one handle per possible device");

std::atomic<int> init_count{0};

bool initialized() { return init_count.load() > 0; }

// The device behind a handle, or -1.
int device_index(nvmlDevice_t device) {
  const auto count = static_cast<std::ptrdiff_t>(fake_cuda_device_count());
  const std::ptrdiff_t index = device - devices;
  return device != nullptr && index >= 0 && index < count ? static_cast<int>(index) : -1;
}

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as NVML formats CUDA's 16-byte UUID.
void format_uuid(int dev, char out[41]) {
  unsigned char b[16];
  fake_cuda_device_uuid(dev, b);
  std::snprintf(out, 41,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
}

nvmlReturn_t copy_string(const char* text, char* out, unsigned int length) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (std::strlen(text) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::strcpy(out, text);
  return NVML_SUCCESS;
}

// Checks init and the handle; *dev is the device index.
nvmlReturn_t open_device(nvmlDevice_t device, int* dev) {
  if (!initialized()) return NVML_ERROR_UNINITIALIZED;
  *dev = device_index(device);
  return *dev < 0 ? NVML_ERROR_INVALID_ARGUMENT : NVML_SUCCESS;
}

}  // namespace

extern "C" {

nvmlReturn_t nvmlInit_v2(void) {
  // FAKE_NVML_INIT_ERROR (read at every call): the nvmlReturn_t nvmlInit fails with, as on a
  // node whose driver is not loaded (9), so a user's handling of that can be tested.
  if (const char* error = std::getenv("FAKE_NVML_INIT_ERROR"); error != nullptr && *error != '\0') {
    const long rc = std::strtol(error, nullptr, 10);
    return rc > 0 && rc < NVML_ERROR_UNKNOWN ? static_cast<nvmlReturn_t>(rc) : NVML_ERROR_UNKNOWN;
  }
  ++init_count;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }

nvmlReturn_t nvmlShutdown(void) {
  int count = init_count.load();
  do {
    if (count == 0) return NVML_ERROR_UNINITIALIZED;
  } while (!init_count.compare_exchange_weak(count, count - 1));
  return NVML_SUCCESS;
}

const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
  }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  if (!initialized()) return NVML_ERROR_UNINITIALIZED;
  return copy_string("580.159.04", version, length);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!initialized()) return NVML_ERROR_UNINITIALIZED;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = static_cast<unsigned int>(fake_cuda_device_count());
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (!initialized()) return NVML_ERROR_UNINITIALIZED;
  if (device == nullptr || index >= static_cast<unsigned int>(fake_cuda_device_count())) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *device = &devices[index];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  if (!initialized()) return NVML_ERROR_UNINITIALIZED;
  if (uuid == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (int dev = 0; dev < fake_cuda_device_count(); ++dev) {
    char text[41];
    format_uuid(dev, text);
    if (std::strcmp(text, uuid) == 0) {
      *device = &devices[dev];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  int dev = 0;
  if (nvmlReturn_t rc = open_device(device, &dev)) return rc;
  char text[41];
  format_uuid(dev, text);
  return copy_string(text, uuid, length);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  int dev = 0;
  if (nvmlReturn_t rc = open_device(device, &dev)) return rc;
  char text[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
  fake_cuda_device_name(dev, text, sizeof(text));
  return copy_string(text, name, length);
}

// 9.0, as the fake CUDA's cuDeviceGetAttribute says (an H100).
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major, int* minor) {
  int dev = 0;
  if (nvmlReturn_t rc = open_device(device, &dev)) return rc;
  if (major == nullptr || minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *major = 9;
  *minor = 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  int dev = 0;
  if (nvmlReturn_t rc = open_device(device, &dev)) return rc;
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  memory->total = fake_cuda_device_total(dev);
  memory->used = fake_cuda_device_used(dev);
  memory->free = memory->total - memory->used;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  int dev = 0;
  if (nvmlReturn_t rc = open_device(device, &dev)) return rc;
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  memory->total = fake_cuda_device_total(dev);
  memory->reserved = 0;
  memory->used = fake_cuda_device_used(dev);
  memory->free = memory->total - memory->used;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* info_count,
                                                     nvmlProcessInfo_t* infos) {
  int dev = 0;
  if (nvmlReturn_t rc = open_device(device, &dev)) return rc;
  if (info_count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  // This process (when it holds memory) or, with FAKE_NVML_DEVICE_PROCESSES=1, every process
  // sharing the device that holds memory on it (as the real NVML lists them), then the
  // processes of others that the test names: FAKE_NVML_OTHER_PIDS, and the file
  // FAKE_NVML_OTHER_PIDS_FILE names (read at every call, so a test can add processes to a
  // running daemon's view). Entries `pid` or `pid:bytes`, comma or newline separated; a pid
  // alone holds 1 GiB. So a filter of the list, and a watchdog of what processes hold, can be
  // tested.
  nvmlProcessInfo_t all[kMaxListed];
  unsigned int n = 0;
  if (const char* every = std::getenv("FAKE_NVML_DEVICE_PROCESSES"); every != nullptr && std::strcmp(every, "1") == 0) {
    int pids[kMaxListed];
    size_t bytes[kMaxListed];
    const int holders = fake_cuda_device_processes(dev, pids, bytes, static_cast<int>(kMaxListed));
    for (int i = 0; i < holders; ++i)
      all[n++] = {static_cast<unsigned int>(pids[i]), bytes[i], kNoMigInstance, kNoMigInstance};
  } else if (const size_t used = fake_cuda_device_used(dev); used > 0) {
    all[n++] = {static_cast<unsigned int>(getpid()), used, kNoMigInstance, kNoMigInstance};
  }
  const auto add_others = [&](const char* list) {
    for (const char* p = list; *p != '\0' && n < kMaxListed;) {
      char* end = nullptr;
      const unsigned long pid = std::strtoul(p, &end, 10);
      if (end == p) break;
      unsigned long long bytes = 1ull << 30;
      if (*end == ':') {
        const char* b = end + 1;
        bytes = std::strtoull(b, &end, 10);
      }
      all[n++] = {static_cast<unsigned int>(pid), bytes, kNoMigInstance, kNoMigInstance};
      p = *end == ',' || *end == '\n' ? end + 1 : end;
    }
  };
  if (const char* others = std::getenv("FAKE_NVML_OTHER_PIDS")) add_others(others);
  if (const char* path = std::getenv("FAKE_NVML_OTHER_PIDS_FILE")) {
    if (FILE* f = std::fopen(path, "r")) {
      char text[4096];
      const size_t len = std::fread(text, 1, sizeof text - 1, f);
      std::fclose(f);
      text[len] = '\0';
      add_others(text);
    }
  }
  if (*info_count < n) {
    *info_count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  *info_count = n;
  if (n == 0) return NVML_SUCCESS;
  if (infos == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned int i = 0; i < n; ++i) infos[i] = all[i];
  return NVML_SUCCESS;
}

}  // extern "C"
