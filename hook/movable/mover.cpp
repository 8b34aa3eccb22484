// The fast suspension's thread (mover.h).
#include "hook/movable/mover.h"

#include <time.h>

#include <atomic>

#include "hook/base/detached_thread.h"
#include "hook/base/log.h"
#include "hook/driver/driver.h"
#include "hook/link/client.h"
#include "hook/movable/host_pool.h"
#include "hook/movable/movable_memory.h"
#include "hook/movable/work_hold.h"
#include "protocol/shm_protocol.h"

namespace cuslice::mover {
namespace {

constexpr int64_t kIdleWaitNs = 200'000'000;  // orders wake it at once; this is for the rest

std::atomic<bool> g_started{false};

// The mover thread's own: whether it holds the process's work, and for which registration.
struct Hold {
  bool held = false;
  const void* attachment = nullptr;
};
Hold g_hold;

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

void sleep_ns(int64_t ns) {
  const timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  nanosleep(&ts, nullptr);
}

int lowest_device(uint32_t devices) {
  for (int d = 0; d < 32; ++d)
    if ((devices >> d) & 1u) return d;
  return -1;
}

// Waits for the work the process queued before the hold on every device it has movable memory
// on: nothing may still read or write what is about to move.
void drain(uint32_t devices) {
  static const auto set = cuda_function<PFN_cuCtxSetCurrent_v4000>("cuCtxSetCurrent");
  static const auto sync = cuda_function<PFN_cuCtxSynchronize_v2000>("cuCtxSynchronize");
  for (int d = 0; d < 32; ++d) {
    if (((devices >> d) & 1u) == 0) continue;
    CUcontext c = movable::context(d);
    if (c != nullptr && set != nullptr && sync != nullptr && set(c) == CUDA_SUCCESS) sync();
  }
}

void report() {
  const movable::Totals t = movable::totals();
  client::report_movable(t.movable, t.moved, host_pool::pinned_bytes());
}

void move_out(const client::MoveOrder& order) {
  const int64_t start = now_ns();
  if (!g_hold.held) {
    work_hold::engage();
    g_hold = {true, order.attachment};
    drain(movable::totals().devices);
  }
  bool failed = false;
  const uint64_t moved =
      order.bytes > 0 ? movable::move_out(order.gpu, order.bytes, client::host_reserve_bytes(), &failed) : 0;
  const shm::MoveResult result = failed                  ? shm::MoveResult::kFailed
                                 : moved >= order.bytes ? shm::MoveResult::kDone
                                                        : shm::MoveResult::kShort;
  const uint64_t took = static_cast<uint64_t>(now_ns() - start);
  client::finish_move(order, static_cast<uint32_t>(result), movable::totals().moved, took);
  int code = 0;
  const char* call = movable::last_failure(&code);
  if (failed)
    CUSLICE_LOG(kWarn, "suspended by the scheduler: %llu MiB of GPU %d moved to host memory in %.3f s, then %s failed "
                       "(CUresult %d)",
                static_cast<unsigned long long>(moved >> 20), order.gpu, static_cast<double>(took) / 1e9, call, code);
  else
    CUSLICE_LOG(kInfo, "suspended by the scheduler: %llu MiB of GPU %d moved to host memory in %.3f s",
                static_cast<unsigned long long>(moved >> 20), order.gpu, static_cast<double>(took) / 1e9);
}

void move_back(const client::MoveOrder& order) {
  const int64_t start = now_ns();
  const movable::Back back = movable::move_back();
  if (back == movable::Back::kDone && g_hold.held) {
    work_hold::release();
    g_hold = {};
  }
  const shm::MoveResult result = back == movable::Back::kDone     ? shm::MoveResult::kDone
                                 : back == movable::Back::kNoRoom ? shm::MoveResult::kDeferred
                                                                  : shm::MoveResult::kFailed;
  const uint64_t took = static_cast<uint64_t>(now_ns() - start);
  client::finish_move(order, static_cast<uint32_t>(result), movable::totals().moved, took);
  int code = 0;
  const char* call = movable::last_failure(&code);
  if (back == movable::Back::kFailed)
    CUSLICE_LOG(kWarn, "moving this process's memory back failed (%s: CUresult %d); it stays in host memory", call,
                code);
  else
    CUSLICE_LOG(kInfo, "resumed by the scheduler in %.3f s%s", static_cast<double>(took) / 1e9,
                back == movable::Back::kDone ? "" : ": not yet, the GPU has no room for it");
}

// The scheduler whose order holds the process is gone (it stopped or died, or the process
// registered with another since): move everything back and go on, as if resumed.
void resume_on_own() {
  if (!g_hold.held && movable::totals().moved == 0) return;
  if (client::attached() && client::current_move_order().attachment == g_hold.attachment) return;
  if (movable::move_back() != movable::Back::kDone) return;  // no room yet: the next pass tries again
  if (g_hold.held) work_hold::release();
  g_hold = {};
  CUSLICE_LOG(kWarn, "the scheduler went away while this process was suspended: it moved its memory back and "
                     "goes on by itself");
}

void* run(void*) {
  client::MoveOrder seen = client::current_move_order();
  for (;;) {
    client::maintain();
    bool grew = false;
    if (!g_hold.held) {
      const uint64_t target = client::host_pool_bytes();
      const int device = lowest_device(movable::totals().devices);
      if (target > host_pool::pinned_bytes() && device >= 0)
        grew = host_pool::grow(target, client::host_reserve_bytes(), device, movable::context(device));
    }
    report();
    const client::MoveOrder order = client::wait_move_order(seen, grew ? 0 : kIdleWaitNs);
    if (order.kind == 0) {
      resume_on_own();
      if (order.attachment == nullptr && !grew) sleep_ns(kIdleWaitNs);  // detached: nothing wakes us
      continue;
    }
    seen = order;
    if (order.kind == static_cast<uint32_t>(shm::MoveOrder::kMoveOut)) move_out(order);
    else if (order.kind == static_cast<uint32_t>(shm::MoveOrder::kMoveBack)) move_back(order);
  }
  return nullptr;
}

}  // namespace

void start() noexcept {
  if (g_started.exchange(true, std::memory_order_acq_rel)) return;
  if (!start_detached_thread(&run, "cuslice-mover"))
    CUSLICE_LOG(kWarn, "cannot start the mover thread: this process is suspended by the driver's checkpoint only");
}

void after_fork_child() noexcept {
  g_started.store(false, std::memory_order_relaxed);
  g_hold = {};
}

}  // namespace cuslice::mover
