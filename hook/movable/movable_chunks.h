// The records of movable memory (movable_memory.h), shared by its two halves: making and
// freeing allocations (movable_memory.cpp) and moving them (chunk_moves.cpp). One record per
// physical chunk: the allocation it belongs to (base and size of the reserved range), its
// place in it, and either its physical handle (on the GPU) or its copy in host memory (off the
// GPU). Records are found by scanning up to the highest one ever used: allocations, frees and
// moves are rare next to launches, and a framework's caching allocator keeps their number in
// the thousands at most.
//
// Everything here is used under the one lock (Lock). May call driver, host_pool and the
// client (report_movable); included by those two files only.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "hook/base/cuda_api.h"
#include "hook/base/settings.h"
#include "hook/driver/driver.h"

namespace cuslice::movable {

constexpr uint32_t kMaxChunks = 1u << 17;
constexpr int kStreams = 4;  // copies in flight per device: enough to fill the link both ways

struct Chunk {
  CUdeviceptr base = 0;  // 0: a free record
  uint64_t alloc_size = 0;
  CUdeviceptr va = 0;
  uint64_t size = 0;
  CUmemGenericAllocationHandle handle = 0;  // 0 while off the GPU
  void* host = nullptr;                     // the copy, while off the GPU
  int32_t device = -1;
  bool pinned = false;
};

struct Records {
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  Chunk* chunks = nullptr;     // kMaxChunks records, one anonymous mapping
  uint32_t* picked = nullptr;  // the moves' scratch, kMaxChunks entries
  uint32_t used = 0;           // records [0, used) may be taken
  size_t granularity[kMaxDevices] = {};
  int peers[kMaxDevices] = {};  // how many of peer_list[d] can reach device d's memory
  int8_t peer_list[kMaxDevices][kMaxDevices] = {};
  bool peers_known[kMaxDevices] = {};
  CUcontext context[kMaxDevices] = {};
  CUstream streams[kMaxDevices][kStreams] = {};
  // The last driver call of a move that failed, and its CUresult, for the mover's log.
  const char* failed_call = "";
  int failed_code = 0;
  std::atomic<int> decided{0};  // 1 movable, -1 not, 0 not yet
  std::atomic<uint64_t> on_gpu{0};
  std::atomic<uint64_t> off_gpu{0};
  std::atomic<uint32_t> devices{0};
};
extern Records g_records;

struct Lock {
  Lock() { pthread_mutex_lock(&g_records.lock); }
  ~Lock() { pthread_mutex_unlock(&g_records.lock); }
};

// The driver's functions movable memory calls that the hook does not hook (the hooked ones go
// through real<>(), so that the hook's own accounting does not see the mover's work).
struct Api {
  PFN_cuMemAddressReserve_v10020 reserve = cuda_function<PFN_cuMemAddressReserve_v10020>("cuMemAddressReserve");
  PFN_cuMemAddressFree_v10020 address_free = cuda_function<PFN_cuMemAddressFree_v10020>("cuMemAddressFree");
  PFN_cuMemMap_v10020 map = cuda_function<PFN_cuMemMap_v10020>("cuMemMap");
  PFN_cuMemUnmap_v10020 unmap = cuda_function<PFN_cuMemUnmap_v10020>("cuMemUnmap");
  PFN_cuMemSetAccess_v10020 set_access = cuda_function<PFN_cuMemSetAccess_v10020>("cuMemSetAccess");
  PFN_cuMemGetAllocationGranularity_v10020 granularity =
      cuda_function<PFN_cuMemGetAllocationGranularity_v10020>("cuMemGetAllocationGranularity");
  PFN_cuDeviceGetCount_v2000 device_count = cuda_function<PFN_cuDeviceGetCount_v2000>("cuDeviceGetCount");
  PFN_cuDeviceCanAccessPeer_v4000 can_access_peer =
      cuda_function<PFN_cuDeviceCanAccessPeer_v4000>("cuDeviceCanAccessPeer");
  PFN_cuCtxSetCurrent_v4000 set_current = cuda_function<PFN_cuCtxSetCurrent_v4000>("cuCtxSetCurrent");
  PFN_cuCtxPushCurrent_v4000 push = cuda_function<PFN_cuCtxPushCurrent_v4000>("cuCtxPushCurrent_v2");
  PFN_cuCtxPopCurrent_v4000 pop = cuda_function<PFN_cuCtxPopCurrent_v4000>("cuCtxPopCurrent_v2");
  PFN_cuCtxSynchronize_v2000 synchronize = cuda_function<PFN_cuCtxSynchronize_v2000>("cuCtxSynchronize");
  PFN_cuStreamCreate_v2000 stream_create = cuda_function<PFN_cuStreamCreate_v2000>("cuStreamCreate");
  PFN_cuStreamSynchronize_v2000 stream_sync = cuda_function<PFN_cuStreamSynchronize_v2000>("cuStreamSynchronize");

  bool complete() const {
    return reserve && address_free && map && unmap && set_access && granularity && device_count && can_access_peer &&
           set_current && push && pop && synchronize && stream_create && stream_sync;
  }
};
const Api& api();

inline bool valid(int device) { return device >= 0 && device < kMaxDevices; }

// What cuMemCreate makes for `device`: pinned device memory, as cuMemAlloc's.
CUmemAllocationProp prop_of(int device);
// `r`, remembered as the last failure (`call`) when it is one.
CUresult noted(const char* call, CUresult r);
// Access to [va, va + size) for `device` and the peers that can reach its memory.
CUresult grant(int device, CUdeviceptr va, uint64_t size);
// Gives back what record i holds on the GPU or in host memory, and frees the record.
void drop(uint32_t i);
// The device's copy streams (made at first use; nullptr if the driver refuses), and waiting
// for all of them.
CUstream* streams(int device);
bool sync_all(int device);
// The primary context of `device`, retained once for the process's life.
CUcontext primary(int device);
// Tells the scheduler what is movable and what is moved now.
void report_totals();

}  // namespace cuslice::movable
