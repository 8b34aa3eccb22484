// CUDA IPC of cuMemAlloc memory. The handle carries what an importer needs to know (device,
// base, size, exporting pid); the memory stays the exporter's, so opening a handle, in this
// process or another one, charges the importer nothing. Exported and imported memory both make
// a checkpoint of the process fail (checkpoint.cpp), as the driver documents.
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "tests/fake_driver/cuda/driver_state.h"

using namespace fake_cuda;

namespace {

struct IpcPayload {
  std::uint64_t magic;
  std::uint64_t pid;
  std::uint64_t base;
  std::uint64_t size;
  std::int32_t device;
};
static_assert(sizeof(IpcPayload) <= CU_IPC_HANDLE_SIZE, "must fit in CUipcMemHandle");

constexpr std::uint64_t kIpcMagic = 0x6375736c69636531;  // "cuslice1"

}  // namespace

extern "C" {

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto found = s->allocations.find(dptr);
  if (found == s->allocations.end() || found->second.kind != AllocationKind::kDevice) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Allocation& allocation = found->second;
  if (!allocation.ipc_exported) {
    allocation.ipc_exported = true;
    s->count_checkpoint_blockers(allocation, 1);
  }
  IpcPayload payload{kIpcMagic, static_cast<std::uint64_t>(getpid()), allocation.base,
                     allocation.size, allocation.device};
  std::memset(handle, 0, sizeof(*handle));
  std::memcpy(handle->reserved, &payload, sizeof(payload));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr* dptr, CUipcMemHandle handle, unsigned int flags) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  IpcPayload payload;
  std::memcpy(&payload, handle.reserved, sizeof(payload));
  if (payload.magic != kIpcMagic || !s->ledger.valid(payload.device)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUctx_st* ctx = nullptr;
  if (CUresult rc = s->current_context(&ctx)) return rc;
  Allocation imported;
  imported.base = s->take_address_range(payload.size);
  imported.size = payload.size;
  imported.device = payload.device;
  imported.kind = AllocationKind::kIpcImport;
  imported.owner = ctx;
  s->allocations.emplace(imported.base, imported);
  s->count_checkpoint_blockers(imported, 1);
  *dptr = imported.base;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  auto found = s->allocations.find(dptr);
  if (found == s->allocations.end() || found->second.kind != AllocationKind::kIpcImport) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  s->count_checkpoint_blockers(found->second, -1);
  s->allocations.erase(found);
  return CUDA_SUCCESS;
}

}  // extern "C"
