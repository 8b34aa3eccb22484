// Device memory the fast suspension can move (docs/design/preemption.md, "Two ways to suspend"). In a
// process of a preemptible tenant that the daemon allows it, cuMemAlloc's memory is made with
// the driver's virtual memory API instead: an address range reserved once, backed by physical
// chunks of at most 256 MiB mapped into it (small enough that what moves is close to what
// was asked for, large enough that an allocation takes few driver calls). A chunk's physical memory can then be given back and
// made again later at the same addresses, its contents copied out and in, while every pointer
// the application holds stays valid. The application sees what cuMemAlloc gives: one range,
// readable and writable from its device (and from the devices that can reach it as a peer),
// freed by cuMemFree (which synchronizes first, as cuMemFree does).
//
// Owns the records of those allocations. Allocation, free and the mover's operations take one
// lock (never the launch path); the records live in one anonymous mapping made at first use,
// so nothing here allocates on the heap. Knows nothing of the scheduler: the mover
// (mover.h) decides when to move, and holds the process's work (work_hold.h) first.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hook/base/cuda_api.h"

namespace cuslice::movable {

inline constexpr uint64_t kChunkBytes = uint64_t{256} << 20;
// Smaller allocations are left to cuMemAlloc (and stay on the GPU while suspended).
inline constexpr uint64_t kMinBytes = uint64_t{2} << 20;

// Whether cuMemAlloc's memory is made movable in this process: decided at its first
// allocation on an attached client (the daemon's ProcessSlot::kFastAllowed and
// CUSLICE_MOVABLE_MEMORY not 0), then fixed. Sets up the mover on the first yes.
bool enabled() noexcept;

// cuMemAlloc's work for `bytes` on `device`: CUDA_ERROR_OUT_OF_MEMORY when the card has no
// room (the caller may then ask for room, preemption.h), other errors as the driver's.
CUresult allocate(int device, size_t bytes, CUdeviceptr* out) noexcept;
// True when `ptr` begins an allocation made here; *result is then cuMemFree's answer.
bool release(CUdeviceptr ptr, CUresult* result) noexcept;
// True when `ptr` lies in an allocation made here: its start and size, as
// cuMemGetAddressRange gives them for cuMemAlloc's.
bool address_range(CUdeviceptr ptr, CUdeviceptr* base, size_t* size) noexcept;
// The device's primary context was reset: its allocations are gone, as cuMemAlloc's are.
void forget_device(int device) noexcept;

struct Totals {
  uint64_t movable = 0;  // on a GPU, in chunks that can move
  uint64_t moved = 0;    // off the GPUs now
  uint32_t devices = 0;  // bit d: something here lives on device d
};
Totals totals() noexcept;

// The mover's operations, with the process's work held and drained. move_out: copies chunks
// of `device` to host memory (the largest allocations first, whole chunks, until `bytes` are
// covered), then gives their physical memory back; returns the bytes it moved, and sets
// *failed when a driver call failed (what moved stays moved). move_back: everything moved, all
// or nothing: kNoRoom leaves it all off the GPU.
uint64_t move_out(int device, uint64_t bytes, uint64_t host_reserve, bool* failed) noexcept;
enum class Back { kDone, kNoRoom, kFailed };
Back move_back() noexcept;
// The last driver call of the mover's operations that failed, and its CUresult, for the log.
const char* last_failure(int* code) noexcept;

// The primary context of `device`, retained once for the process's life (the mover's copies
// and pinned memory live in it); nullptr if the driver refuses.
CUcontext context(int device) noexcept;

void after_fork_child() noexcept;

}  // namespace cuslice::movable
