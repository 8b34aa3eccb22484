// The GPU's time-slice token as a hooked process sees it: take it (waiting on the grant
// futex, or at once when the tenant outranks the holder), publish demand without blocking,
// release it when the process's work drained, and report GPU time. Fast paths are atomic
// loads and stores; the slow path sleeps on the futex and kicks the daemon over the socket.
#include <sys/socket.h>

#include <atomic>

#include "client.h"
#include "client_state.h"
#include "futex.h"

namespace cuslice::client {

using namespace internal;

namespace {

constexpr int64_t kWaitSliceNs = 100'000'000;  // a waiter re-checks the daemon this often

void kick() {
  const int fd = g.fd.load(std::memory_order_relaxed);
  if (fd >= 0) send(fd, "k", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

// Takes the token from a holder (or a draining tenant) the tenant outranks, without asking
// the daemon (shm_protocol.h, GpuState::holder): a high-priority tenant starts at the next
// kernel boundary instead of after a round trip through the daemon. True when it holds it.
bool try_preempt(const Attachment* att, int gpu) {
  shm::Segment& seg = *att->segment;
  if (seg.abi_minor < 2) return false;  // the daemon does not publish who may
  shm::GpuState& gs = seg.gpus[gpu];
  const shm::Tenant& me = seg.tenants[att->tenant];
  const uint32_t mine = me.priority.load(std::memory_order_relaxed);
  if (mine < gs.preempt_priority.load(std::memory_order_acquire) ||
      (me.gpu[gpu].flags.load(std::memory_order_relaxed) & shm::TenantGpu::kCapped))
    return false;
  uint32_t cur = gs.holder.load(std::memory_order_acquire);
  if (cur == att->tenant) return true;
  // The published floor may be older than the holder: compare with the holder itself.
  if (cur != shm::kNoTenant &&
      (cur >= shm::kMaxTenants || seg.tenants[cur].priority.load(std::memory_order_relaxed) >= mine))
    return false;
  if (!gs.holder.compare_exchange_strong(cur, att->tenant, std::memory_order_acq_rel)) return false;
  gs.preempt_priority.store(mine + 1, std::memory_order_release);
  gs.grant_seq.fetch_add(1, std::memory_order_release);
  futex_wake_all(&gs.grant_seq);  // the tenant's other waiting threads and processes
  kick();                         // the daemon adopts it at its next step
  return true;
}

}  // namespace

void token_acquire(int gpu) noexcept {
  if (static_cast<unsigned>(gpu) >= kMaxGpus) return;
  Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return;
  shm::GpuState& gs = att->segment->gpus[gpu];
  std::atomic<uint32_t>& flags = att->segment->processes[att->slot].gpu_flags[gpu];
  if (gs.holder.load(std::memory_order_acquire) == att->tenant) {
    if (!(flags.load(std::memory_order_relaxed) & shm::ProcessSlot::kBusy))
      flags.fetch_or(shm::ProcessSlot::kBusy, std::memory_order_relaxed);
    return;
  }
  // Outranking the holder: take the token, no waiting.
  if (try_preempt(att, gpu)) {
    flags.fetch_or(shm::ProcessSlot::kBusy, std::memory_order_seq_cst);
    return;
  }
  // Slow path: publish the demand (slot flags first, so the daemon sees it when the kick
  // arrives), then sleep on the grant sequence.
  // kBusy is not set here: it means work queued on the GPU, which only a holder can have
  // added; the daemon waits for a revoked holder's busy processes to drain, and a waiting
  // thread must not make a process with kernels still running look drained or busy.
  flags.fetch_add(1, std::memory_order_seq_cst);
  gs.waiting_tenants.fetch_or(uint64_t{1} << att->tenant, std::memory_order_seq_cst);
  kick();
  // Time waited goes to the tenant as it passes, so a long wait shows while it lasts.
  std::atomic<uint64_t>& waited = att->segment->tenants[att->tenant].gpu[gpu].wait_ns;
  int64_t since = now_ns();
  for (;;) {
    const uint32_t seq = gs.grant_seq.load(std::memory_order_acquire);
    if (gs.holder.load(std::memory_order_acquire) == att->tenant) break;
    if (g.current.load(std::memory_order_acquire) != att) break;  // detached meanwhile
    if (try_preempt(att, gpu)) break;  // the holder changed to one this tenant outranks
    if (connection_lost(att)) {
      mark_lost(att);
      break;
    }
    futex_wait(&gs.grant_seq, seq, kWaitSliceNs);
    // Still waiting after a slice: make sure the demand is published (an older daemon could
    // drop the bit) and tell the daemon again.
    if (!(gs.waiting_tenants.load(std::memory_order_seq_cst) & (uint64_t{1} << att->tenant))) {
      gs.waiting_tenants.fetch_or(uint64_t{1} << att->tenant, std::memory_order_seq_cst);
      kick();
    }
    const int64_t now = now_ns();
    waited.fetch_add(static_cast<uint64_t>(now - since), std::memory_order_relaxed);
    since = now;
  }
  waited.fetch_add(static_cast<uint64_t>(now_ns() - since), std::memory_order_relaxed);
  flags.fetch_or(shm::ProcessSlot::kBusy, std::memory_order_seq_cst);  // about to launch
  flags.fetch_sub(1, std::memory_order_seq_cst);
}

bool token_try(int gpu) noexcept {
  if (static_cast<unsigned>(gpu) >= kMaxGpus) return true;
  Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return true;
  shm::GpuState& gs = att->segment->gpus[gpu];
  std::atomic<uint32_t>& flags = att->segment->processes[att->slot].gpu_flags[gpu];
  if (gs.holder.load(std::memory_order_acquire) == att->tenant || try_preempt(att, gpu)) {
    if (!(flags.load(std::memory_order_relaxed) & shm::ProcessSlot::kBusy))
      flags.fetch_or(shm::ProcessSlot::kBusy, std::memory_order_seq_cst);
    return true;
  }
  // As token_acquire's slow path publishes a waiting thread: the slot's count first, then the
  // tenant's bit, then the kick. Afterwards only the bit is re-checked (the daemon may drop it
  // between its scan and its clear: restore_waiting), which is one load.
  const uint64_t bit = uint64_t{1} << att->tenant;
  if (!g.parked[gpu].exchange(true, std::memory_order_acq_rel)) {
    flags.fetch_add(1, std::memory_order_seq_cst);
  } else if (gs.waiting_tenants.load(std::memory_order_relaxed) & bit) {
    return false;
  }
  gs.waiting_tenants.fetch_or(bit, std::memory_order_seq_cst);
  kick();
  return false;
}

void token_unpark(int gpu) noexcept {
  if (static_cast<unsigned>(gpu) >= kMaxGpus || !g.parked[gpu].load(std::memory_order_relaxed)) return;
  if (!g.parked[gpu].exchange(false, std::memory_order_acq_rel)) return;
  if (const Attachment* att = g.current.load(std::memory_order_acquire))
    att->segment->processes[att->slot].gpu_flags[gpu].fetch_sub(1, std::memory_order_seq_cst);
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
         att->segment->gpus[gpu].holder.load(std::memory_order_acquire) == att->tenant;
}

void token_release(int gpu) noexcept {
  if (static_cast<unsigned>(gpu) >= kMaxGpus) return;
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return;
  shm::GpuState& gs = att->segment->gpus[gpu];
  att->segment->processes[att->slot].gpu_flags[gpu].fetch_and(~shm::ProcessSlot::kBusy,
                                                              std::memory_order_seq_cst);
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
  att->segment->tenants[att->tenant].gpu[gpu].gpu_time_ns.fetch_add(ns, std::memory_order_relaxed);
}

}  // namespace cuslice::client
