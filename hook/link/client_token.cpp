// The GPU's time-slice token as a hooked process sees it: wait for it (on the grant futex in
// the read-only segment), publish demand without blocking, release it when the process's
// work drained, and report GPU time. Demand and counters go to the tenant region; only the
// daemon changes the holder, also when this tenant outranks the holder (at the step the
// kick triggers: shm_protocol.h, "Priority takeover"). Fast paths are atomic loads and
// stores; the slow path kicks the daemon over the socket and sleeps on the futex.
#include <sys/socket.h>

#include <atomic>

#include "hook/link/client.h"
#include "hook/link/client_state.h"
#include "protocol/futex.h"

namespace cuslice::client {

using namespace internal;

namespace {

constexpr int64_t kWaitSliceNs = 100'000'000;  // a waiter re-checks the daemon this often

void kick() {
  const int fd = g.fd.load(std::memory_order_relaxed);
  if (fd >= 0) send(fd, "k", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

// The token is elsewhere: publish the demand (the record's count first, so the daemon sees it
// when the kick arrives; for a tenant that outranks the holder this is the claim), then sleep
// on the grant sequence. Out of line: the holder's check is on every launch.
[[gnu::noinline]] void wait_for_token(Attachment* att, int gpu) noexcept {
  const shm::GpuState& gs = att->segment->gpus[gpu];
  std::atomic<uint32_t>& flags = att->self().gpu_flags[gpu];
  // kBusy is not set here: it means work queued on the GPU, which only a holder can have
  // added; the daemon waits for a revoked holder's busy processes to drain, and a waiting
  // thread must not make a process with kernels still running look drained or busy.
  flags.fetch_add(1, std::memory_order_seq_cst);
  kick();
  // Time waited goes to the tenant as it passes, so a long wait shows while it lasts.
  std::atomic<uint64_t>& waited = att->use(gpu).wait_ns;
  int64_t since = now_ns();
  const uint64_t bit = uint64_t{1} << att->tenant;
  for (;;) {
    const uint32_t seq = gs.grant_seq.load(std::memory_order_acquire);
    if (att->holds(gs.holder.load(std::memory_order_acquire), gpu)) break;
    if (g.current.load(std::memory_order_acquire) != att) break;  // detached meanwhile
    if (connection_lost(att)) {
      mark_lost(att);
      break;
    }
    futex_wait(&gs.grant_seq, seq, kWaitSliceNs);
    // Woken, or a slice passed, and the daemon does not show this tenant waiting: the step
    // that read the kick may have begun before it; tell it again.
    if (!(gs.waiting_tenants.load(std::memory_order_seq_cst) & bit) &&
        !att->holds(gs.holder.load(std::memory_order_acquire), gpu))
      kick();
    const int64_t now = now_ns();
    waited.fetch_add(static_cast<uint64_t>(now - since), std::memory_order_relaxed);
    since = now;
  }
  waited.fetch_add(static_cast<uint64_t>(now_ns() - since), std::memory_order_relaxed);
  flags.fetch_or(shm::kBusy, std::memory_order_seq_cst);  // about to launch
  flags.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace

void internal::send_kick() noexcept { kick(); }

void token_acquire(int gpu) noexcept {
  if (static_cast<unsigned>(gpu) >= kMaxGpus) return;
  Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return;
  if (!att->holds(att->segment->gpus[gpu].holder.load(std::memory_order_acquire), gpu)) return wait_for_token(att, gpu);
  std::atomic<uint32_t>& flags = att->self().gpu_flags[gpu];
  if (!(flags.load(std::memory_order_relaxed) & shm::kBusy)) flags.fetch_or(shm::kBusy, std::memory_order_relaxed);
}

bool token_try(int gpu) noexcept {
  if (static_cast<unsigned>(gpu) >= kMaxGpus) return true;
  Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return true;
  const shm::GpuState& gs = att->segment->gpus[gpu];
  std::atomic<uint32_t>& flags = att->self().gpu_flags[gpu];
  if (att->holds(gs.holder.load(std::memory_order_acquire), gpu)) {
    if (!(flags.load(std::memory_order_relaxed) & shm::kBusy))
      flags.fetch_or(shm::kBusy, std::memory_order_seq_cst);
    return true;
  }
  // As token_acquire's slow path publishes a waiting thread: the record's count, then the
  // kick, once until token_unpark. The step the kick triggers sees the count, and every
  // later step too while it stays: nothing to re-check here.
  if (!g.parked[gpu].exchange(true, std::memory_order_acq_rel)) {
    flags.fetch_add(1, std::memory_order_seq_cst);
    kick();
  }
  return false;
}

void token_unpark(int gpu) noexcept {
  if (static_cast<unsigned>(gpu) >= kMaxGpus || !g.parked[gpu].load(std::memory_order_relaxed)) return;
  if (!g.parked[gpu].exchange(false, std::memory_order_acq_rel)) return;
  if (const Attachment* att = g.current.load(std::memory_order_acquire))
    att->self().gpu_flags[gpu].fetch_sub(1, std::memory_order_seq_cst);
}

bool lower_priority_waiting(int gpu) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr || static_cast<unsigned>(gpu) >= kMaxGpus) return false;
  const uint32_t mine = att->segment->tenants[att->tenant].priority.load(std::memory_order_relaxed);
  uint64_t waiting = att->segment->gpus[gpu].waiting_tenants.load(std::memory_order_acquire) &
                     ~(uint64_t{1} << att->tenant);
  for (; waiting != 0; waiting &= waiting - 1) {
    const unsigned t = static_cast<unsigned>(__builtin_ctzll(waiting));
    if (att->segment->tenants[t].priority.load(std::memory_order_relaxed) < mine) return true;
  }
  return false;
}

bool holding(int gpu) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  return att != nullptr && static_cast<unsigned>(gpu) < kMaxGpus &&
         att->holds(att->segment->gpus[gpu].holder.load(std::memory_order_acquire), gpu);
}

void token_release(int gpu) noexcept {
  if (static_cast<unsigned>(gpu) >= kMaxGpus) return;
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return;
  const shm::GpuState& gs = att->segment->gpus[gpu];
  att->self().gpu_flags[gpu].fetch_and(~shm::kBusy, std::memory_order_seq_cst);
  // Others wait: tell the daemon now, whether this tenant still holds the token (early
  // hand-off) or it was revoked and the daemon waits for its queued work to drain (else it
  // would learn it only at its next drain poll).
  const uint64_t others = gs.waiting_tenants.load(std::memory_order_seq_cst) & ~(uint64_t{1} << att->tenant);
  if (others != 0) kick();
}

void report_gpu_time(int gpu, uint64_t ns) noexcept {
  if (static_cast<unsigned>(gpu) >= kMaxGpus) return;
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return;
  att->use(gpu).gpu_time_ns.fetch_add(ns, std::memory_order_relaxed);
}

}  // namespace cuslice::client
