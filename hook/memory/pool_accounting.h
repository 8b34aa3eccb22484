// Stream-ordered pools and graph memory grow without any allocation call the hook could
// charge one by one, and they keep freed memory reserved. They are charged by what they
// reserve:
//
//   - Each cuMemAllocAsync / cuMemAllocFromPoolAsync / graph memory node pre-charges the
//     most the pool can grow for it (the size rounded up to the pools' 32 MiB growth step).
//     A stream-ordered allocation draws it from a credit that the ledger is charged for
//     eight chunks at a time, so most make no reservation of their own (in a tenant, none on
//     the tenant's shared counter). Frees charge nothing back: the pool keeps the memory.
//   - replace_precharges() (slow path: a refused charge, cuMemGetInfo) replaces the pre-charges of
//     completed allocations with what the device's pools and graph memory really reserve
//     (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), and
//     gives the credit back.
//
// The ledger thus never holds less than the pools reserve, and the fast path is a
// compare-and-swap on the credit and three atomic adds (the pre-charge in flight, up and
// down, and since the last reading). Why replace_precharges() is safe against allocations in
// flight is written at it in pool_accounting.cpp.
#pragma once

#include <cstdint>

#include "hook/base/cuda_api.h"

namespace cuslice::pool_accounting {

// Pre-charges a stream-ordered allocation of `bytes` on `device`. False: refused (the hook
// returns CUDA_ERROR_OUT_OF_MEMORY). On true, call end() with the same `charged`.
bool begin(int device, uint64_t bytes, uint64_t* charged);
void end(int device, uint64_t charged, bool succeeded);

// Graph memory nodes: pre-charged like begin(), but kept until a graph has been uploaded or
// launched on the device (the reserve appears then, not when the node is added).
bool begin_graph_node(int device, uint64_t bytes);
void note_graph_launch(int device);

// Pools the hook knows of and their devices. Imported pools are not registered: their
// memory belongs to the exporting process.
void register_pool(CUmemoryPool pool, int device);
void unregister_pool(CUmemoryPool pool);
int pool_device(CUmemoryPool pool);  // -1: unknown pool

// The device a stream's work runs on (stream 0: the current context's).
int stream_device(CUstream stream, bool per_thread);

// Near the limit the worst-case pre-charge is refused even when the pool could serve the
// request from reserve it already holds (and that is already charged). Then the request is
// tried without a pre-charge, and what the pool's reserve grew by is read back:
//   pool_reserve(): the pool's RESERVED and USED, false if unreadable;
//   charge_growth(): charges growth the driver made anyway; false if it did not fit (the
//   caller undoes the allocation; the growth stays charged until the next reading reads it
//   back, since a pool keeps freed memory).
CUmemoryPool current_pool(int device);
bool pool_reserve(CUmemoryPool pool, uint64_t* reserved, uint64_t* used);
bool charge_growth(int device, uint64_t bytes);

// Slow path, reached from quota's slow paths under quota's mutex (startup.cpp registers it
// with quota::set_pool_reserves(), as it does trim()). Returns the reading (what the
// device's pools and graph memory reserve now).
uint64_t replace_precharges(int device);
// Releases pool reserve that no allocation uses (cuMemPoolTrimTo, graph memory trim).
// True if the device had such reserve.
bool trim(int device);

// fork() child (startup.cpp's handler): no pools, nothing pre-charged.
void reset_after_fork();

}  // namespace cuslice::pool_accounting
