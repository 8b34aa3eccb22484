// CUDA IPC: memory shared with other processes, by cuIpc* handles or VMM shareable handles.
// Passed to the driver unchanged; a process that uses it is marked in the scheduler, since the
// driver's checkpoint cannot move such memory: the scheduler never tries to checkpoint the
// process (and, in a preemptible tenant, stops it when the tenant's memory is needed;
// preemption.h).
#include "hook/driver/driver.h"
#include "hook/memory/preemption.h"
#include "protocol/shm_protocol.h"

using namespace cuslice;

namespace {

CUresult marked(CUresult r) {
  if (r == CUDA_SUCCESS) preemption::uses_unmovable(shm::ProcessSlot::kUsesIpc);
  return r;
}

}  // namespace

extern "C" {

CUSLICE_EXPORT CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  auto fn = real<Sym::cuIpcGetMemHandle>();
  if (fn == nullptr) return unavailable_result();
  return marked(fn(pHandle, dptr));
}

CUSLICE_EXPORT CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  auto fn = real<Sym::cuIpcOpenMemHandle_v2>();
  if (fn == nullptr) return unavailable_result();
  return marked(fn(pdptr, handle, Flags));
}

CUSLICE_EXPORT CUresult CUDAAPI cuMemExportToShareableHandle(void* shareableHandle, CUmemGenericAllocationHandle handle,
                                                            CUmemAllocationHandleType handleType,
                                                            unsigned long long flags) {
  auto fn = real<Sym::cuMemExportToShareableHandle>();
  if (fn == nullptr) return unavailable_result();
  return marked(fn(shareableHandle, handle, handleType, flags));
}

CUSLICE_EXPORT CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                                              CUmemAllocationHandleType shHandleType) {
  auto fn = real<Sym::cuMemImportFromShareableHandle>();
  if (fn == nullptr) return unavailable_result();
  return marked(fn(handle, osHandle, shHandleType));
}

}  // extern "C"
