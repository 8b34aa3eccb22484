// Memory reservation against the tenant's quota: the quota is read from the segment, the
// counter is the tenant region's. Reserve before the driver allocates, release after, charge
// what was found held. Lock-free and without system calls; reads the attachment
// client_attach.cpp publishes and keeps counting the process's own bytes while detached, so
// that the next registration brings them.
#include <atomic>

#include "hook/link/client.h"
#include "hook/link/client_state.h"
#include "protocol/ppm.h"
#include "protocol/saturating.h"

namespace cuslice::client {

using namespace internal;

namespace {

// Subtracts up to `amount` without going below zero; returns what was subtracted.
uint64_t saturating_sub(std::atomic<uint64_t>& counter, uint64_t amount) {
  uint64_t cur = counter.load(std::memory_order_relaxed);
  uint64_t take;
  do {
    take = cur < amount ? cur : amount;
  } while (!counter.compare_exchange_weak(cur, cur - take, std::memory_order_acq_rel,
                                          std::memory_order_relaxed));
  return take;
}

// The tenant's quota in bytes on `gpu` (a percentage resolved against the card's size); none
// on a GPU its configuration keeps it off (`gpus`: a daemon of minor 3 or later writes every
// GPU's share, and 0 there means not allowed; older ones write none, so it is not read).
uint64_t quota_of(const shm::Segment& segment, const shm::Tenant& tenant, int gpu) {
  if (segment.abi_minor >= 3 && tenant.gpu[gpu].share_ppm.load(std::memory_order_relaxed) == 0) return 0;
  uint64_t limit = tenant.memory_quota.load(std::memory_order_relaxed);
  if (const uint32_t ppm = tenant.memory_quota_ppm.load(std::memory_order_relaxed)) {
    const uint64_t card = g.device_memory[gpu].load(std::memory_order_relaxed);
    limit = card ? ppm_of_bytes(card, ppm) : shm::kUnlimited;  // card unknown: count, and let the local limit decide
  }
  return limit;
}

}  // namespace

void note_oom_refusal(int gpu) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr || static_cast<unsigned>(gpu) >= kMaxGpus) return;
  att->use(gpu).oom_refusals.fetch_add(1, std::memory_order_relaxed);
}

Reserve memory_try_reserve(int gpu, uint64_t bytes, uint64_t keep_free, bool* crossed) noexcept {
  if (static_cast<unsigned>(gpu) >= kMaxGpus) return Reserve::kUngated;
  g.local_charged[gpu].fetch_add(bytes, std::memory_order_relaxed);
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return Reserve::kUngated;
  const uint64_t quota = quota_of(*att->segment, att->segment->tenants[att->tenant], gpu);
  shm::TenantGpuUse& use = att->use(gpu);
  uint64_t limit = quota;
  if (quota != shm::kUnlimited) {
    const uint64_t keep = saturating_add(keep_free, use.kept_free.load(std::memory_order_relaxed));
    limit = quota > keep ? quota - keep : 0;
  }
  uint64_t cur = use.memory_used.load(std::memory_order_relaxed);
  do {
    if (bytes > limit || cur > limit - bytes) {
      saturating_sub(g.local_charged[gpu], bytes);
      return Reserve::kOverQuota;
    }
  } while (!use.memory_used.compare_exchange_weak(cur, cur + bytes, std::memory_order_acq_rel,
                                                  std::memory_order_relaxed));
  // After the tenant counter (see ProcessUse::charged for why this order).
  att->self().charged[gpu].fetch_add(bytes, std::memory_order_release);
  if (crossed != nullptr) {
    // Sixteenths rounded down to a power of two: a shift, not a division, per reservation.
    const uint64_t step = quota == shm::kUnlimited ? 0 : quota / 16;
    const unsigned shift = step == 0 ? 64 : 63 - __builtin_clzll(step);
    *crossed = shift < 64 && (cur >> shift) != ((cur + bytes) >> shift);
  }
  return Reserve::kOk;
}

void memory_release(int gpu, uint64_t bytes) noexcept {
  if (static_cast<unsigned>(gpu) >= kMaxGpus) return;
  saturating_sub(g.local_charged[gpu], bytes);
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return;
  // Slot first, then tenant: a kill in between leaks, it never over-returns. Bytes reserved
  // while detached were never charged to this slot; the saturation drops them.
  const uint64_t taken = saturating_sub(att->self().charged[gpu], bytes);
  saturating_sub(att->use(gpu).memory_used, taken);
}

void memory_charge(int gpu, uint64_t bytes) noexcept {
  if (static_cast<unsigned>(gpu) >= kMaxGpus) return;
  g.local_charged[gpu].fetch_add(bytes, std::memory_order_relaxed);
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return;
  att->use(gpu).memory_used.fetch_add(bytes, std::memory_order_acq_rel);
  att->self().charged[gpu].fetch_add(bytes, std::memory_order_release);
}

uint64_t tenant_memory_quota(int gpu) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr || static_cast<unsigned>(gpu) >= kMaxGpus) return shm::kUnlimited;
  return quota_of(*att->segment, att->segment->tenants[att->tenant], gpu);
}

uint64_t tenant_memory_used(int gpu) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr || static_cast<unsigned>(gpu) >= kMaxGpus) return 0;
  return att->use(gpu).memory_used.load(std::memory_order_relaxed);
}

uint64_t tenant_memory_kept(int gpu) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr || static_cast<unsigned>(gpu) >= kMaxGpus) return 0;
  return att->use(gpu).kept_free.load(std::memory_order_seq_cst);
}

bool tenant_memory_replace_kept(int gpu, uint64_t expected, uint64_t desired) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr || static_cast<unsigned>(gpu) >= kMaxGpus) return true;
  return att->use(gpu).kept_free.compare_exchange_strong(expected, desired, std::memory_order_seq_cst);
}

// The mark first (deadline, then bit), the allowance after: a reconciliation that read the
// word before the addition fails its compare-exchange and scans again, and then sees the mark.
bool memory_begin_warmup(int gpu, int64_t now_ns, int64_t until_ns, uint64_t allowance) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr || static_cast<unsigned>(gpu) >= kMaxGpus) return false;
  shm::ProcessUse& me = att->self();
  const uint32_t bit = 1u << gpu;
  int64_t until = me.young_until_ns.load(std::memory_order_seq_cst);
  const bool was_young = (me.young_gpus.load(std::memory_order_seq_cst) & bit) != 0 && until > now_ns;
  while (until < until_ns && !me.young_until_ns.compare_exchange_weak(until, until_ns, std::memory_order_seq_cst)) {
  }
  me.young_gpus.fetch_or(bit, std::memory_order_seq_cst);
  if (was_young) return false;
  std::atomic<uint64_t>& kept = att->use(gpu).kept_free;
  uint64_t cur = kept.load(std::memory_order_seq_cst);
  while (!kept.compare_exchange_weak(cur, saturating_add(cur, allowance), std::memory_order_seq_cst)) {
  }
  return true;
}

bool memory_end_warmup(int gpu) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr || static_cast<unsigned>(gpu) >= kMaxGpus) return false;
  const uint32_t bit = 1u << gpu;
  return (att->self().young_gpus.fetch_and(~bit, std::memory_order_seq_cst) & bit) != 0;
}

}  // namespace cuslice::client
