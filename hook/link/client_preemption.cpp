// Memory preemption, the hook's side: an allocation the card could not hold asks the daemon to
// suspend preemptible tenants (a MemoryRequest on the socket) and waits for the answer the
// daemon writes in the process's slot. Slow paths only: one send, then a futex wait; no
// allocation, no lock. And a process of a suspended tenant waits for its resumption before it
// uses the GPU (two loads when the tenant runs).
#include <sys/socket.h>

#include <atomic>
#include <cstring>

#include "hook/link/client.h"
#include "hook/link/client_state.h"
#include "protocol/futex.h"
#include "protocol/socket_protocol.h"

namespace cuslice::client {

using namespace internal;

namespace {

constexpr uint32_t kSequenceMask = 0xFFFFFF;

bool usable(const Attachment* att) { return att != nullptr; }

bool suspended(uint32_t word) {
  const uint32_t state = word & shm::Tenant::kStateMask;
  return state == shm::Tenant::kSuspending || state == shm::Tenant::kSuspended || state == shm::Tenant::kResuming;
}

}  // namespace

int64_t allocation_wait_ns() noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (!usable(att)) return 0;
  return static_cast<int64_t>(att->segment->allocation_wait_ns.load(std::memory_order_relaxed));
}

MemoryAnswer request_memory(int gpu, uint64_t bytes, uint64_t free_bytes, int64_t deadline_ns) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (!usable(att) || static_cast<unsigned>(gpu) >= kMaxGpus) return MemoryAnswer::kDetached;
  uint32_t sequence = (g.memory_sequence.fetch_add(1, std::memory_order_relaxed) + 1) & kSequenceMask;
  if (sequence == 0) sequence = (g.memory_sequence.fetch_add(1, std::memory_order_relaxed) + 1) & kSequenceMask;
  wire::MemoryRequest request;
  request.gpu = static_cast<uint32_t>(gpu);
  request.sequence = sequence;
  request.bytes = bytes;
  request.free_bytes = free_bytes;
  if (send(g.fd.load(std::memory_order_relaxed), &request, sizeof request, MSG_NOSIGNAL) != sizeof request)
    return MemoryAnswer::kDetached;
  const std::atomic<uint32_t>& word = att->segment->processes[att->slot].memory_decision;
  for (;;) {
    const uint32_t seen = word.load(std::memory_order_acquire);
    const uint32_t answered = seen >> 8;
    if (answered == sequence) {
      return (seen & 0xFF) == static_cast<uint32_t>(shm::MemoryDecision::kRetry) ? MemoryAnswer::kRetry
                                                                                  : MemoryAnswer::kRefused;
    }
    // A later request of another thread was answered: the daemon answers in order, so this
    // one was too; its memory may be there: try again.
    if (answered != 0 && ((answered - sequence) & kSequenceMask) < (kSequenceMask / 2)) return MemoryAnswer::kRetry;
    if (g.current.load(std::memory_order_acquire) != att ||
        att->segment->state.load(std::memory_order_acquire) != static_cast<uint32_t>(shm::DaemonState::kRunning))
      return MemoryAnswer::kDetached;  // the daemon left: nobody will answer
    const int64_t left = deadline_ns - now_ns();
    if (left <= 0) return MemoryAnswer::kTimedOut;
    // Bounded slices: a daemon that died never answers, and maintain() notices that elsewhere.
    futex_wait(&word, seen, left < 100'000'000 ? left : 100'000'000);
  }
}

bool mps_settings(MpsSettings& out) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr || att->spatial == nullptr || (att->reply_flags & wire::RegisterReply::kJoinMps) == 0) return false;
  const shm::SpatialState* sp = shm::spatial_state(*att->segment);
  if (sp == nullptr || sp->mps_pipe_directory[0] == '\0' ||
      std::memchr(sp->mps_pipe_directory, '\0', sizeof sp->mps_pipe_directory) == nullptr)
    return false;
  out.pipe_directory = sp->mps_pipe_directory;
  out.sm_percent = att->spatial->sm_percent.load(std::memory_order_relaxed);
  if (out.sm_percent == 0 || out.sm_percent > 100) out.sm_percent = 100;
  out.client_priority = att->spatial->client_priority.load(std::memory_order_relaxed) != 0 ? 1 : 0;
  out.memory_limit_mib = att->spatial->memory_limit_mib.load(std::memory_order_relaxed);
  return true;
}

int spatial_device_count() noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  const shm::SpatialState* sp = att != nullptr ? shm::spatial_state(*att->segment) : nullptr;
  if (sp == nullptr) return 0;
  int count = 0;
  const uint32_t spatial = sp->spatial_gpus.load(std::memory_order_relaxed);
  for (uint32_t gpu = 0; gpu < kMaxGpus; ++gpu)
    count += ((spatial >> gpu) & 1u) != 0 && att->segment->gpus[gpu].memory_total.load(std::memory_order_relaxed) != 0;
  return count;
}

bool tenant_preemptible() noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  return usable(att) &&
         (att->segment->tenants[att->tenant].preemption.load(std::memory_order_relaxed) & shm::Tenant::kPreemptible) != 0;
}

bool wait_while_suspended() noexcept {
  for (bool waited = false;; waited = true) {
    Attachment* att = g.current.load(std::memory_order_acquire);
    if (!usable(att)) return waited;
    const std::atomic<uint32_t>& word = att->segment->tenants[att->tenant].preemption;
    const uint32_t seen = word.load(std::memory_order_acquire);
    if (!suspended(seen)) return waited;
    // A daemon that died never wakes us: bounded slices, and the connection checked at each.
    if (connection_lost(att)) {
      mark_lost(att);
      return waited;
    }
    futex_wait(&word, seen, 100'000'000);
  }
}

void note_checkpoint_blocker(uint32_t flag) noexcept {
  const uint32_t before = g.checkpoint_flags.fetch_or(flag, std::memory_order_relaxed);
  if (const Attachment* att = g.current.load(std::memory_order_acquire); usable(att)) {
    att->self().checkpoint_flags.fetch_or(flag, std::memory_order_relaxed);  // for older daemons
    // The daemon takes the claim from this process's own connection only; once per use.
    if ((before & flag) != flag) send_blocker_claim(g.fd.load(std::memory_order_relaxed));
  }
}

}  // namespace cuslice::client
