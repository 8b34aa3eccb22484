// Launches counted by the thread that makes them. While a process's launches are not bounded
// (no other tenant registered, or preempted by its time slices: activity.h), each launching
// thread counts the launches it began and those it forwarded in a record of its own, with
// plain stores: a launch then takes no locked instruction of the hook's (a shared counter's
// locked add costs tens of nanoseconds a launch, a few percent of the fastest launches). The
// monitor folds the records into its devices' counts (Device::tickets, Device::launched) at
// each pass, so everything else reads those counts as before; bounded launches keep taking
// tickets from the device, which give them their place in the ring of launches.
//
// A thread claims a record at its first launch counted so and gives it back when it exits;
// the counts stay, and go on growing for the next thread that claims it. A thread that finds
// every record claimed, or launches on a device beyond kRecordDevices, counts on the device.
//
// May call monitor_state only; called by activity.cpp (launching threads) and monitor.cpp.
#pragma once

#include <atomic>
#include <cstdint>

#include "hook/monitor/monitor_state.h"

namespace cuslice::activity {

// This thread's record (index + 1): the one it holds, else one claimed now (tried once per
// thread); 0: none is free.
int claim_record();

// The launching thread, before the driver has the launch (begun) and after it (done): each a
// load and a release store of the thread's own counter. Done is stored after the stream was
// marked, so a monitor that folds it finds the stream marked (see launched() in activity.cpp).
inline void count_begun(LaunchRecord& r, int device) {
  std::atomic<uint64_t>& c = r.on[device].begun;
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}
inline void count_done(LaunchRecord& r, int device) {
  std::atomic<uint64_t>& c = r.on[device].done;
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

// The monitor thread only: fold() (under g_state.lock) adds what the records counted since the
// last fold to the device's tickets, then to its launched count (the forwarded counts read
// first, so that tickets never fall behind launched); fold_begun() the tickets only, to see
// launches under way now.
void fold(int device);
void fold_begun(int device);
// Forwarded launches not folded yet (for the count logged at exit).
uint64_t unfolded_done(int device);

// In the child of fork(): the counts start at zero, and only the forking thread keeps its
// record.
void reset_records_in_child();

}  // namespace cuslice::activity
