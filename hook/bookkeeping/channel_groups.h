// The process's GPU channel groups and the hardware time slice each runs for.
//
// A channel group (TSG) is what the GPU time-slices between: libcuda allocates a few per
// context through the kernel driver, and sets the slice of its compute group (2 ms on the
// H100; the others keep RM's 1 ms). When another context has work pending, the GPU lets the
// running group finish its slice, then preempts it, inside a kernel if need be. While a tenant
// of higher priority is registered, the monitor shortens this process's slices to the
// scheduler's `lower_priority_timeslice` (apply()): the higher tenant's work then waits at
// most that long for the GPU, where it would otherwise wait for the kernel in flight to end
// (docs/design/hook.md, "Time slices"). apply(0) puts back the values the driver had set. While
// they are short the monitor reads them back (verify()): only slices the kernel confirms let
// the process launch without the token.
//
// The groups are learnt from the process's own ioctls (rm_control_hooks.cpp): an allocation
// of a channel group, a free of it or of its client, and libcuda's own time-slice controls.
// Set-up and teardown only, never per launch: the table is scanned without a lock on a free,
// and changed under a mutex.
//
// May call the driver table (the next ioctl) and nothing else of the hook.
#pragma once

#include <cstdint>

namespace cuslice::channel_groups {

// From the ioctl hook, after the kernel answered NV_OK.
void allocated(int fd, uint32_t client, uint32_t group);
void freed(uint32_t client, uint32_t object);
// libcuda set a group's slice itself: remember it as the driver's value, and shorten it again
// if the process's slices are short.
void driver_set(uint32_t client, uint32_t group, uint64_t us);

// From the monitor thread: the slice every group of the process should have; 0: the driver's
// own. Controls are sent only for groups whose slice changes.
void apply(uint64_t us);

// From the monitor thread, while the slice is short: reads back every group's slice from the
// kernel. True when there is at least one group and every one runs at `us`, so that the GPU
// itself preempts all of the process's work within that slice. A group found at another
// value (set behind the hook's back, by an ioctl that did not pass through it) is shortened
// again, and the answer is false until a later look finds it short.
bool verify(uint64_t us);

// Groups known, how many run at the short slice, and how many the kernel refused a control
// (one each: such a group is left alone since), for the debug log.
struct Counts {
  unsigned groups = 0;
  unsigned shortened = 0;
  unsigned refused = 0;
};
Counts counts();

void after_fork_child();

}  // namespace cuslice::channel_groups
