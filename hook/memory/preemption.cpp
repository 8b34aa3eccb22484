// Waiting for the scheduler to make room on the card (preemption.h). May call driver,
// scheduler_link, log and the client.
#include "hook/memory/preemption.h"

#include <time.h>

#include <atomic>

#include "hook/base/log.h"
#include "hook/link/client.h"
#include "hook/link/scheduler_link.h"
#include "protocol/shm_protocol.h"

namespace cuslice::preemption {
namespace {

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

}  // namespace

int64_t deadline(int /*device*/) {
  if (!scheduler_link::enabled()) return 0;
  const int64_t wait = client::allocation_wait_ns();
  return wait > 0 ? now_ns() + wait : 0;
}

bool room_made(int device, uint64_t bytes, int64_t deadline, int round) {
  if (round > 0) {
    const int64_t pause = (round < 20 ? round : 20) * 50'000'000LL;  // 50 ms more each time, at most 1 s
    if (now_ns() + pause >= deadline) return false;
    const timespec ts{static_cast<time_t>(pause / 1'000'000'000), static_cast<long>(pause % 1'000'000'000)};
    nanosleep(&ts, nullptr);
  }
  // The card's free memory as the driver sees it: what the scheduler must add to.
  size_t free = 0, total = 0;
  auto info = real<Sym::cuMemGetInfo_v2>();
  if (info == nullptr || info(&free, &total) != CUDA_SUCCESS) free = 0;
  if (bytes == 0) bytes = free + 1;
  const int gpu = scheduler_link::gpu(device);
  CUSLICE_LOG(kInfo, "device %d: %llu bytes do not fit the card (%zu free): asking the scheduler for room", device,
              static_cast<unsigned long long>(bytes), free);
  switch (client::request_memory(gpu, bytes, free, deadline)) {
    case client::MemoryAnswer::kRetry:
      return true;
    case client::MemoryAnswer::kRefused:
      CUSLICE_LOG(kInfo, "device %d: the scheduler cannot make room (cuslice status says why)", device);
      return false;
    case client::MemoryAnswer::kTimedOut:
      CUSLICE_LOG(kWarn, "device %d: no room made within the scheduler's allocation wait: out of memory", device);
      return false;
    case client::MemoryAnswer::kDetached:
      return false;
  }
  return false;
}

void uses_unmovable(uint32_t flag) {
  if (!scheduler_link::enabled()) return;
  client::note_checkpoint_blocker(flag);
  // Once per process, and only on this slow path (an IPC or managed-memory call).
  static std::atomic<bool> said{false};
  if (client::tenant_preemptible() && !said.exchange(true, std::memory_order_relaxed)) {
    CUSLICE_LOG(kWarn,
                "this process uses %s, which the driver's checkpoint cannot move: its tenant is preemptible, so the "
                "scheduler stops this process rather than suspend it when the tenant's memory is needed, unless "
                "configured otherwise (cuslice status says)",
                flag == shm::kUsesManaged ? "managed memory" : flag == shm::kUsesIpc ? "CUDA IPC memory" : "MPS");
  }
}

void wait_while_suspended() {
  if (scheduler_link::enabled()) client::wait_while_suspended();
}

}  // namespace cuslice::preemption
