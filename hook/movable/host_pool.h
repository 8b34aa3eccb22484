// Host memory for the fast suspension to copy a process's device memory into (mover.h): a pool
// of pinned blocks the mover prepares in the background, up to what the daemon allows the
// process (its tenant's `host_pool`) while the host keeps `host_reserve` available, and, past
// it, pageable memory mapped for one copy. Pinning is the slow part (tens of seconds for tens of
// GiB), which is why the pool is made before it is needed; a copy into pinned memory runs at
// the link's speed. The application must not notice it being made: the driver's own pinned
// allocation holds the driver's lock while it faults the pages in (seconds per GiB, during
// which every CUDA call of the process waits), so a block is mapped and faulted in here, with
// no lock held, and only then registered with the driver, one block per step of the mover.
//
// Called by the mover's thread, and give_back() also by a cuMemFree of memory that is off the
// GPU, always under movable_memory's lock, except grow(), which only the mover calls and which
// touches nothing the others change. No heap (fixed arrays, mmap). Calls the driver
// through its own function lookups; never touches device memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hook/base/cuda_api.h"

namespace cuslice::host_pool {

// Pinned memory is made in blocks of this size, each registered with the driver in one call
// that holds the driver's lock about 10 ms; a chunk of moved memory is never larger.
inline constexpr uint64_t kBlockBytes = uint64_t{256} << 20;

// Adds one block when the pool holds less than `target` bytes and the host keeps `reserve`
// bytes available after it (MemAvailable in /proc/meminfo). `context`: made current for the
// allocation (pinned memory belongs to a context; the block is portable to every other).
// True when it added one.
bool grow(uint64_t target, uint64_t reserve, int device, CUcontext context) noexcept;
// `device`'s primary context was reset, freeing the pinned memory made in it: forgotten.
void forget_device(int device) noexcept;
// Bytes of pinned memory the pool holds.
uint64_t pinned_bytes() noexcept;

// Memory for `bytes` (at most kBlockBytes) of moved data: pinned if the pool has room, else
// pageable (mapped now) if the host keeps `reserve` available after it; nullptr if neither.
// *pinned says which.
void* take(uint64_t bytes, uint64_t reserve, bool* pinned) noexcept;
// Gives back what take() gave (pageable memory is unmapped; pinned memory returns to the
// pool once everything taken has come back).
void give_back(void* memory, uint64_t bytes, bool pinned) noexcept;

// The host's available memory (MemAvailable), or 0 when it cannot be read.
uint64_t host_available() noexcept;

void after_fork_child() noexcept;

}  // namespace cuslice::host_pool
