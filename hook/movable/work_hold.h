// Holding the process's work while its memory is moved (the fast suspension, mover.h): every
// entry point that makes the GPU touch memory (kernel launches, graph launches, copies, sets,
// stream memory operations) passes a Guard around its call into the driver. Once the mover has
// engaged the hold, new calls wait in their Guard, and engage() returns only when no call is
// inside the driver any more; release() lets them go. A call that began before the hold ends
// normally: what it queued is drained by the mover afterwards.
//
// Costs one relaxed load and a predictable branch per call in a process that never backs its
// memory for moving (arm() is never called); in one that does, an atomic increment and
// decrement on a shared word around each call. Never allocates, logs or locks.
//
// May call nothing above the foundations (futexes only).
#pragma once

#include <atomic>
#include <cstdint>

namespace cuslice::work_hold {

namespace internal {
extern std::atomic<bool> armed;
void enter() noexcept;
void leave() noexcept;
}  // namespace internal

// From the first allocation the process backs for moving (movable_memory.h): Guards count.
void arm() noexcept;

class Guard {
 public:
  Guard() noexcept : counted_(internal::armed.load(std::memory_order_relaxed)) {
    if (counted_) internal::enter();
  }
  ~Guard() {
    if (counted_) internal::leave();
  }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  bool counted_;
};

// The mover's side. engage: no new call enters the driver; returns once the calls inside it
// have left. release: the calls waiting go on. held: between the two.
void engage() noexcept;
void release() noexcept;
bool held() noexcept;

// In the child of fork(): nothing is held, nothing is in flight.
void after_fork_child() noexcept;

}  // namespace cuslice::work_hold
