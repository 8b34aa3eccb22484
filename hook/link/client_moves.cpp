// The fast suspension, the hook's side of its protocol (shm_protocol.h, ProcessSlot::move_* and
// ProcessUse::move_*): the daemon's orders to this process, read from its slot, and the
// process's report in its record. For the hook's mover thread only: slow paths, no allocation,
// no lock. Never moves anything itself (hook/movable/mover.h does).
#include <atomic>

#include "hook/link/client.h"
#include "hook/link/client_state.h"
#include "protocol/futex.h"

namespace cuslice::client {

using namespace internal;

namespace {

MoveOrder read_order(const Attachment* att) {
  MoveOrder o;
  o.attachment = att;
  const shm::ProcessSlot& slot = att->segment->processes[att->slot];
  o.sequence = slot.move_seq.load(std::memory_order_acquire);
  const uint32_t word = slot.move_order.load(std::memory_order_relaxed);
  o.kind = word & 0xFF;
  o.gpu = static_cast<int>((word >> 8) & 0xFF);
  o.bytes = slot.move_bytes.load(std::memory_order_relaxed);
  if (o.sequence == 0 || o.gpu >= static_cast<int>(kMaxGpus)) o.kind = 0;
  return o;
}

}  // namespace

bool fast_allowed() noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  return att != nullptr &&
         (att->segment->processes[att->slot].move_policy.load(std::memory_order_relaxed) & shm::ProcessSlot::kFastAllowed);
}

uint64_t host_pool_bytes() noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  return att ? uint64_t{att->segment->processes[att->slot].host_pool_mib.load(std::memory_order_relaxed)} << 20 : 0;
}

uint64_t host_reserve_bytes() noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  return att ? uint64_t{att->segment->processes[att->slot].host_reserve_mib.load(std::memory_order_relaxed)} << 20 : 0;
}

MoveOrder current_move_order() noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  return att ? read_order(att) : MoveOrder{};
}

MoveOrder wait_move_order(const MoveOrder& seen, int64_t timeout_ns) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return MoveOrder{};
  const std::atomic<uint32_t>& word = att->segment->processes[att->slot].move_seq;
  const uint32_t before = att == seen.attachment ? seen.sequence : word.load(std::memory_order_acquire);
  if (word.load(std::memory_order_acquire) == before) futex_wait(&word, before, timeout_ns);
  if (g.current.load(std::memory_order_acquire) != att) return MoveOrder{};
  MoveOrder o = read_order(att);
  if (att == seen.attachment && o.sequence == seen.sequence) o.kind = 0;
  return o;
}

void report_movable(uint64_t movable_bytes, uint64_t moved_bytes, uint64_t pool_bytes) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return;
  shm::ProcessUse& self = att->self();
  self.movable_bytes.store(movable_bytes, std::memory_order_relaxed);
  self.moved_bytes.store(moved_bytes, std::memory_order_relaxed);
  self.pool_bytes.store(pool_bytes, std::memory_order_relaxed);
  self.move_flags.fetch_or(shm::ProcessUse::kMovable, std::memory_order_release);
}

void report_movable(uint64_t movable_bytes, uint64_t moved_bytes) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return;
  att->self().movable_bytes.store(movable_bytes, std::memory_order_relaxed);
  att->self().moved_bytes.store(moved_bytes, std::memory_order_relaxed);
}

void finish_move(const MoveOrder& order, uint32_t result, uint64_t moved_bytes, uint64_t ns) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr || att != order.attachment) return;
  shm::ProcessUse& self = att->self();
  self.move_result.store(result, std::memory_order_relaxed);
  self.moved_bytes.store(moved_bytes, std::memory_order_relaxed);
  self.move_ns.store(ns, std::memory_order_relaxed);
  self.move_done.store(order.sequence, std::memory_order_release);
  send_kick();
}

}  // namespace cuslice::client
