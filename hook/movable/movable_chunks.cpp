// The records of movable memory and the driver steps both its halves take
// (movable_chunks.h). May call driver, host_pool and the client.
#include "hook/movable/movable_chunks.h"

#include "hook/link/client.h"
#include "hook/movable/host_pool.h"

namespace cuslice::movable {

Records g_records;

const Api& api() {
  static const Api a;
  return a;
}

CUmemAllocationProp prop_of(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

CUresult noted(const char* call, CUresult r) {
  if (r != CUDA_SUCCESS) {
    g_records.failed_call = call;
    g_records.failed_code = static_cast<int>(r);
  }
  return r;
}

CUresult grant(int device, CUdeviceptr va, uint64_t size) {
  CUmemAccessDesc desc[kMaxDevices + 1];
  int n = 0;
  desc[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc[n].location.id = device;
  desc[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  for (int i = 0; i < g_records.peers[device]; ++i) {
    desc[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc[n].location.id = g_records.peer_list[device][i];
    desc[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  CUresult r = api().set_access(va, size, desc, static_cast<size_t>(n));
  if (r != CUDA_SUCCESS && n > 1) {
    // A peer the driver will not map here after all: the device alone, as cuMemAlloc gives.
    g_records.peers[device] = 0;
    r = api().set_access(va, size, desc, 1);
  }
  return r;
}

void drop(uint32_t i) {
  Chunk& c = g_records.chunks[i];
  if (c.handle != 0) {
    api().unmap(c.va, c.size);
    real<Sym::cuMemRelease>()(c.handle);
    g_records.on_gpu.fetch_sub(c.size, std::memory_order_relaxed);
  } else if (c.host != nullptr) {
    host_pool::give_back(c.host, c.size, c.pinned);
    g_records.off_gpu.fetch_sub(c.size, std::memory_order_relaxed);
  }
  c = Chunk{};
}

CUstream* streams(int device) {
  if (g_records.streams[device][0] != nullptr) return g_records.streams[device];
  for (CUstream& s : g_records.streams[device])
    if (api().stream_create(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return nullptr;
  return g_records.streams[device];
}

bool sync_all(int device) {
  bool ok = true;
  for (CUstream s : g_records.streams[device])
    if (s != nullptr && api().stream_sync(s) != CUDA_SUCCESS) ok = false;
  return ok;
}

CUcontext primary(int device) {
  if (!valid(device)) return nullptr;
  if (g_records.context[device] == nullptr) {
    CUcontext c = nullptr;
    if (real<Sym::cuDevicePrimaryCtxRetain>()(&c, device) == CUDA_SUCCESS) g_records.context[device] = c;
  }
  return g_records.context[device];
}

void report_totals() {
  client::report_movable(g_records.on_gpu.load(std::memory_order_relaxed),
                         g_records.off_gpu.load(std::memory_order_relaxed));
}

}  // namespace cuslice::movable
