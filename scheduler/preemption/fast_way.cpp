// FastWay (fast_way.h): writing the orders in the processes' slots, reading the answers in
// the tenant's region.
#include "scheduler/preemption/fast_way.h"

#include <algorithm>
#include <initializer_list>

#include "protocol/futex.h"

namespace cuslice {

using Nanos = FastWay::Nanos;

namespace {

// How long hooks may take to answer: a floor of 15 s for holding and draining their work,
// then one nanosecond per byte to copy (10^9 bytes a second, well below what a PCIe link
// moves), so that only a hook that is stuck (or copying into pageable memory on a starved
// host) runs out of it. At most ten minutes, whatever a tenant's figures say.
Nanos answer_deadline(Nanos now, uint64_t bytes) {
  constexpr uint64_t kMostBytes = uint64_t{585} * 1'000'000'000;  // 15 s + 585 s: ten minutes
  return now + std::chrono::seconds(15) + std::chrono::nanoseconds(std::min(bytes, kMostBytes));
}

bool one_of(uint32_t result, std::initializer_list<shm::MoveResult> results) {
  return std::any_of(results.begin(), results.end(),
                     [&](shm::MoveResult r) { return result == static_cast<uint32_t>(r); });
}

}  // namespace

FastWay::FastWay(SharedSegment& segment, const TenantRegions& regions, const ProcessTable& processes,
                 const TenantTable& tenants)
    : segment_(segment), regions_(regions), processes_(processes), tenants_(tenants) {}

void FastWay::write_policies() {
  for (const ProcessRecord& rec : processes_.all())
    if (rec.tenant < shm::kMaxTenants) tenants_.write_move_policy(rec.tenant, segment_->processes[rec.slot]);
}

uint32_t FastWay::write_order(const ProcessRecord& rec, Moves moves, uint32_t gpu, uint64_t bytes) {
  const shm::MoveOrder kind = moves == Moves::kOut ? shm::MoveOrder::kMoveOut : shm::MoveOrder::kMoveBack;
  shm::ProcessSlot& slot = segment_->processes[rec.slot];
  slot.move_bytes.store(bytes, std::memory_order_relaxed);
  slot.move_order.store(static_cast<uint32_t>(kind) | (gpu << 8), std::memory_order_relaxed);
  uint32_t sequence = slot.move_seq.load(std::memory_order_relaxed) + 1;
  if (sequence == 0) sequence = 1;  // 0 means "no order yet"
  slot.move_seq.store(sequence, std::memory_order_release);
  futex_wake_all(&slot.move_seq);
  return sequence;
}

void FastWay::order(uint32_t t, Moves moves, uint32_t gpu, uint64_t bytes, Nanos now) {
  Wait& wait = waits_[t];
  wait.waiting = true;
  wait.moves = moves;
  wait.gpu = gpu;
  wait.deadline = answer_deadline(now, bytes);
  const shm::TenantRegion* region = regions_.get(t);
  if (region == nullptr) return;  // nobody to answer: the time allowed runs out
  struct Candidate {
    const ProcessRecord* rec;
    uint64_t movable;
  };
  std::vector<Candidate> all;
  for (const ProcessRecord& rec : processes_.all()) {
    if (rec.tenant != t) continue;
    const shm::ProcessUse& use = region->processes[rec.slot];
    // What the process can move off the GPU: its hook's word, never more than it holds there.
    const uint64_t movable = std::min(use.movable_bytes.load(std::memory_order_relaxed),
                                      use.charged[gpu].load(std::memory_order_relaxed));
    all.push_back({&rec, movable});
  }
  std::stable_sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) { return a.movable > b.movable; });
  wait.orders.clear();
  uint64_t left = moves == Moves::kOut ? bytes : 0;  // moving back, every process is asked for all
  for (const Candidate& c : all) {
    const uint64_t part = std::min(c.movable, left);
    left -= part;
    wait.orders.push_back({c.rec->slot, c.rec->pid, write_order(*c.rec, moves, gpu, part)});
  }
}

bool FastWay::read_answers(uint32_t t, Answer& answer) const {
  const Wait& wait = waits_[t];
  const shm::TenantRegion* region = regions_.get(t);
  bool all = region != nullptr;
  for (const Order& o : wait.orders) {
    const ProcessRecord* rec = processes_.at(o.slot);
    if (rec == nullptr || rec->pid != o.pid || rec->tenant != t || region == nullptr) continue;  // gone
    const shm::ProcessUse& use = region->processes[o.slot];
    if (use.move_done.load(std::memory_order_acquire) != o.sequence) {
      all = false;
      continue;
    }
    const uint32_t result = use.move_result.load(std::memory_order_relaxed);
    if (!one_of(result, {shm::MoveResult::kDone, shm::MoveResult::kShort, shm::MoveResult::kDeferred}))
      answer.failed = true;
    if (result == static_cast<uint32_t>(shm::MoveResult::kDeferred)) answer.deferred = true;
    // The hook's word, bounded by what the process holds on the GPU.
    answer.moved += std::min(use.moved_bytes.load(std::memory_order_relaxed),
                             use.charged[wait.gpu].load(std::memory_order_relaxed));
  }
  return all;
}

FastWay::Answers FastWay::poll(Nanos now) {
  Answers out;
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    Wait& wait = waits_[t];
    if (!wait.waiting) continue;
    Answer answer;
    answer.tenant = t;
    answer.moves = wait.moves;
    const bool all = read_answers(t, answer);
    if (!all && now < wait.deadline) {
      out.wake = std::min({out.wake, wait.deadline, now + kPollPeriod});
      continue;
    }
    answer.timed_out = !all;
    wait.waiting = false;
    out.done.push_back(answer);
  }
  return out;
}

}  // namespace cuslice
