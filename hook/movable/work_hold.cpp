// The hold on the process's work (work_hold.h). Two futex words: `hold` (0 running, 1 held),
// which waiting calls sleep on, and `inflight`, the calls inside the driver, which the mover
// sleeps on. Both sides use sequentially consistent operations, so a call that saw no hold has
// been counted before the mover reads the count (Dekker's pattern).
#include "hook/movable/work_hold.h"

#include "protocol/futex.h"

namespace cuslice::work_hold {

namespace internal {
constinit std::atomic<bool> armed{false};
}  // namespace internal

namespace {

constinit std::atomic<uint32_t> hold{0};
constinit std::atomic<uint32_t> inflight{0};

// Bounded sleeps: a lost wake-up costs at most this long, never a hang.
constexpr int64_t kSliceNs = 50'000'000;

void leave_counted() noexcept {
  if (inflight.fetch_sub(1, std::memory_order_seq_cst) == 1 && hold.load(std::memory_order_seq_cst) != 0)
    futex_wake_all(&inflight);
}

}  // namespace

void internal::enter() noexcept {
  for (;;) {
    inflight.fetch_add(1, std::memory_order_seq_cst);
    if (hold.load(std::memory_order_seq_cst) == 0) return;
    leave_counted();
    while (hold.load(std::memory_order_acquire) != 0) futex_wait(&hold, 1, kSliceNs);
  }
}

void internal::leave() noexcept { leave_counted(); }

void arm() noexcept { internal::armed.store(true, std::memory_order_relaxed); }

void engage() noexcept {
  hold.store(1, std::memory_order_seq_cst);
  for (uint32_t n; (n = inflight.load(std::memory_order_seq_cst)) != 0;) futex_wait(&inflight, n, kSliceNs);
}

void release() noexcept {
  hold.store(0, std::memory_order_seq_cst);
  futex_wake_all(&hold);
}

bool held() noexcept { return hold.load(std::memory_order_acquire) != 0; }

void after_fork_child() noexcept {
  // The child's threads are gone and it owns no device memory: nothing to hold.
  hold.store(0, std::memory_order_relaxed);
  inflight.store(0, std::memory_order_relaxed);
}

}  // namespace cuslice::work_hold
