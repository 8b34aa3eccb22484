// How long each kernel is expected to take on the GPU: learnt per kernel (function and launch
// shape, or graph) from how long the batches the monitor sees complete took, with the mean
// kernel time as the estimate of a kernel not measured yet. The queue bound (queue_bound.h)
// is the sum of these estimates over the launches in flight.
//
// Launching threads call kernel_slot() and estimate(); the rest is the monitor's. May call
// monitor_state, and the client to report GPU time (account()).
#pragma once

#include <cstdint>

#include "hook/monitor/monitor_state.h"

namespace cuslice::activity {

// The slot of a kernel's learnt time, added if new; -1 when the table is full (the kernel is
// then estimated at the mean).
int kernel_slot(uintptr_t key);

// What a launch of the kernel in slot + 1 is expected to take.
inline uint32_t estimate(uint32_t kernel, const Device& dev) {
  const uint32_t learnt = kernel != 0 ? g_state.kernels[kernel - 1].ns.load(std::memory_order_relaxed) : 0;
  return learnt != 0 ? learnt : dev.mean_ns.load(std::memory_order_relaxed);
}

// Learns from the launches completed since the last look (at `looked`; 0: none).
void learn(Device& dev, int device, int64_t now, int64_t looked, uint64_t completed);
// Takes the estimates of the launches completed since the last pass off the queued time.
void retire_estimates(Device& dev, int device, uint64_t completed);
// Reports the busy interval ending now, and refines the mean kernel time (time with launches
// in flight per completed launch, decaying): the estimate of kernels not measured yet.
void account(Device& dev, int gpu, int64_t now, uint64_t completed);

}  // namespace cuslice::activity
