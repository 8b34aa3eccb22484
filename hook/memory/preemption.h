// Memory preemption, the hook's part (docs/design/preemption.md): when the driver refuses an
// allocation that the tenant's quota allowed (the card is full), ask the scheduler to suspend
// preemptible tenants of lower priority, wait for its answer a bounded time (the scheduler's
// `preemption.allocation_wait`), and allocate again each time it says memory was freed.
// Never on the fast path: only after the driver said out of memory. Also what the scheduler
// must know not to try a checkpoint on a process: the memory the driver's checkpoint cannot
// move.
//
// May call driver, scheduler_link, log and the client.
#pragma once

#include <cstdint>

#include "hook/driver/driver.h"

namespace cuslice::preemption {

// CLOCK_MONOTONIC ns until which an allocation on `device` that did not fit may wait for the
// scheduler; 0 when it may not (no scheduler, or nobody the scheduler could suspend).
int64_t deadline(int device);
// Asks the scheduler once for `bytes` on `device` (0: one byte more than is free); true:
// memory was freed, allocate again.
// `round` counts the requests already made for this allocation: from the second on, it first
// waits a little longer each time (the memory the scheduler freed was not enough, or was
// taken meanwhile), so that an allocation that keeps failing does not keep the scheduler busy.
bool room_made(int device, uint64_t bytes, int64_t deadline, int round);

// `first`: what the driver answered. On CUDA_ERROR_OUT_OF_MEMORY, waits for room and calls
// `allocate` again as long as the scheduler frees memory; returns the last answer.
template <class Allocate>
CUresult after_out_of_memory(int device, uint64_t bytes, CUresult first, Allocate allocate) {
  if (first != CUDA_ERROR_OUT_OF_MEMORY) return first;
  const int64_t until = deadline(device);
  CUresult r = first;
  for (int round = 0; until != 0 && r == CUDA_ERROR_OUT_OF_MEMORY && room_made(device, bytes, until, round); ++round)
    r = allocate();
  return r;
}

// A launch the driver refused for memory (a module loaded lazily at the first launch, a
// kernel's local memory): nothing says how much it needs, so it asks for room as an
// allocation of one byte more than the card has free would, which the scheduler makes with
// its room margin beyond, and calls `retry` again as long as room is made.
template <class Retry>
CUresult after_launch_out_of_memory(int device, CUresult first, Retry retry) {
  return device < 0 ? first : after_out_of_memory(device, 0, first, retry);
}

// This process uses memory the checkpoint cannot move (shm::ProcessSlot::kUses*). In a
// preemptible tenant, says once (warn) what that means for it.
void uses_unmovable(uint32_t flag);

// Before an allocation: while this process's tenant is suspended (or being suspended or
// resumed), waits until it runs again, so that a process that was not there to be suspended
// (it joined the tenant since, or had no CUDA state yet) takes no memory the tenant is giving
// back. Two atomic loads when the tenant runs; nothing without a scheduler.
void wait_while_suspended();

}  // namespace cuslice::preemption
