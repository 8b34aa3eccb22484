// cuInit, the driver version, and the device queries.
#include <cstdio>
#include <cstring>

#include "tests/fake_driver/cuda/device_identity.h"
#include "tests/fake_driver/cuda/driver_state.h"

using namespace fake_cuda;

namespace {

CUresult get_uuid(CUuuid* uuid, CUdevice dev) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!s->ledger.valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  device_uuid(dev, reinterpret_cast<unsigned char*>(uuid->bytes));
  return CUDA_SUCCESS;
}

int attribute_value(CUdevice_attribute attribute, CUdevice dev, bool mps_client) {
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 0x19 + dev;
    case CU_DEVICE_ATTRIBUTE_MPS_ENABLED: return mps_client ? 1 : 0;
    // What the fake implements, so that callers probing for it take those paths.
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
    default: return 0;
  }
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Session s;
  // The timeline named by FAKE_CUDA_SHARED_DEVICE could not be used: fail loudly rather than
  // run on a private one, which would make a multi-process test pass or fail for the wrong reason.
  if (s->timeline_status != CUDA_SUCCESS) {
    std::fprintf(stderr, "fake libcuda: %s\n", s->timeline.error().c_str());
    return s->timeline_status;
  }
  // An MPS client (CUDA_MPS_PIPE_DIRECTORY) connects to its control daemon first.
  if (!s->initialized) {
    if (CUresult rc = mps_connect(*s)) return rc;
  }
  s->initialized = true;
  return CUDA_SUCCESS;
}

// Like the real driver, answers before cuInit.
CUresult CUDAAPI cuDriverGetVersion(int* driver_version) {
  if (driver_version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driver_version = kDriverVersion;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int* count) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = s->ledger.device_count();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!s->ledger.valid(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice dev) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!s->ledger.valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::strncpy(name, kDeviceName, static_cast<std::size_t>(len) - 1);
  name[len - 1] = '\0';
  return CUDA_SUCCESS;
}

// The two ABIs differ only for MIG instances, which the fake has none of.
CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) { return get_uuid(uuid, dev); }
CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) { return get_uuid(uuid, dev); }

CUresult CUDAAPI cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice dev) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!s->ledger.valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *value = attribute_value(attribute, dev, s->mps.connected);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!s->ledger.valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = s->ledger.total(dev);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetPCIBusId(char* pci_bus_id, int len, CUdevice dev) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (pci_bus_id == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!s->ledger.valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  format_pci_bus_id(dev, pci_bus_id, static_cast<std::size_t>(len));
  return CUDA_SUCCESS;
}

}  // extern "C"
