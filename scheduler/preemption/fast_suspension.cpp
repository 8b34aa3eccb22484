// Preemptor (preemptor.h): the fast way of suspending (memory_preemption.h, rule 6), which the
// tenant's processes carry out in their hooks on the daemon's orders (shm_protocol.h,
// ProcessSlot::move_* and ProcessUse::move_*). Moving out: every process holds its work,
// drains it, and those asked move their part of the GPU's memory to host memory. Moving back:
// all of it back, then the work goes on. The daemon writes orders and reads answers; it never
// waits for them on the event loop (step() looks at them at every wake-up; each answer kicks
// it). A hook that fails, or does not answer in time, is not trusted further: the driver's
// checkpoint takes the tenant's rest. What the hooks report is the tenant's word, bounded by
// what its processes hold; a tenant that reports more than it moved leaves the next request
// short, and is checkpointed then (rule 6).
#include <spdlog/spdlog.h>

#include <algorithm>

#include "protocol/futex.h"
#include "scheduler/preemption/preemptor.h"

namespace cuslice {

using Nanos = Preemptor::Nanos;

namespace {

double secs(Nanos n) { return static_cast<double>(n.count()) / 1e9; }

// How long hooks may take to answer: a floor for holding and draining their work, then the
// copy at 1 GiB/s, a tenth of what a PCIe link moves, so that only a hook that is stuck (or
// copying into pageable memory on a starved host) runs out of it.
Nanos answer_deadline(Nanos now, uint64_t bytes) {
  return now + std::chrono::seconds(15) + std::chrono::nanoseconds(bytes);  // 1 ns per byte: 1 GB/s
}

// How often step() looks at the answers while some are missing, besides the kicks.
constexpr Nanos kPollPeriod = std::chrono::milliseconds(50);

}  // namespace

void Preemptor::write_move_policies() {
  for (const ProcessRecord& rec : processes_.all())
    if (rec.tenant < shm::kMaxTenants) tenants_.write_move_policy(rec.tenant, segment_->processes[rec.slot]);
}

void Preemptor::send_orders(uint32_t t, shm::MoveOrder kind, uint32_t gpu, uint64_t bytes) {
  Suspension& s = suspensions_[t];
  const shm::TenantRegion* region = regions_.get(t);
  if (region == nullptr) return;
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
  s.orders.clear();
  uint64_t left = bytes;
  for (const Candidate& c : all) {
    uint64_t part = 0;
    if (kind == shm::MoveOrder::kMoveOut) {
      part = std::min(c.movable, left);
      left -= part;
    }
    shm::ProcessSlot& slot = segment_->processes[c.rec->slot];
    slot.move_bytes.store(part, std::memory_order_relaxed);
    slot.move_order.store(static_cast<uint32_t>(kind) | (gpu << 8), std::memory_order_relaxed);
    uint32_t sequence = slot.move_seq.load(std::memory_order_relaxed) + 1;
    if (sequence == 0) sequence = 1;  // 0 means "no order yet"
    slot.move_seq.store(sequence, std::memory_order_release);
    futex_wake_all(&slot.move_seq);
    s.orders.push_back({c.rec->slot, c.rec->pid, sequence, part});
  }
}

void Preemptor::start_fast_suspension(uint32_t t, Nanos now, uint32_t gpu, uint64_t bytes) {
  Suspension& s = suspensions_[t];
  // A tenant suspended the fast way already keeps its suspension: its hooks hold its work and
  // move more.
  if (!(s.fast && s.hooks_hold)) {
    s = Suspension{};
    s.bytes.assign(shm::kMaxGpus, 0);
    for (const ProcessRecord& rec : processes_.all()) {
      if (rec.tenant != t || regions_.get(t) == nullptr) continue;
      Suspension::Process p;
      p.pid = rec.pid;
      p.start_time = rec.start_time;
      p.bytes = charged(t, rec.slot);
      s.processes.push_back(std::move(p));
    }
    s.fast = true;
    s.hooks_hold = true;
    s.fast_gpu = gpu;
  }
  s.operation_started = now;
  give_orders(t, Suspension::Moves::kOut, gpu, bytes, now);
}

void Preemptor::start_fast_resume(uint32_t t, Nanos now) {
  give_orders(t, Suspension::Moves::kBack, suspensions_[t].fast_gpu, 0, now);
}

void Preemptor::give_orders(uint32_t t, Suspension::Moves moves, uint32_t gpu, uint64_t bytes, Nanos now) {
  Suspension& s = suspensions_[t];
  s.busy = true;
  send_orders(t, moves == Suspension::Moves::kOut ? shm::MoveOrder::kMoveOut : shm::MoveOrder::kMoveBack, gpu, bytes);
  s.moves = moves;
  s.moves_deadline = answer_deadline(now, moves == Suspension::Moves::kOut ? bytes : s.moved_out);
  publish_state(t);
}

void Preemptor::escalate(uint32_t t, Nanos now, const std::string& why) {
  Suspension& s = suspensions_[t];
  spdlog::warn("tenant {}: {}; the driver's checkpoint takes the rest", segment_->tenants[t].name, why);
  preemption_.escalate(t);
  s.fast = false;
  s.operation_started = now;
  start_suspension(t, now, {}, 0, s.fast_gpu);
}

Nanos Preemptor::poll_moves(Nanos now) {
  Nanos wake = kNever;
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    Suspension& s = suspensions_[t];
    if (s.moves == Suspension::Moves::kNone) continue;
    const shm::TenantRegion* region = regions_.get(t);
    bool all = region != nullptr, failed = false, deferred = false;
    uint64_t moved = 0;
    for (const Suspension::Order& o : s.orders) {
      const ProcessRecord* rec = processes_.at(o.slot);
      if (rec == nullptr || rec->pid != o.pid || rec->tenant != t || region == nullptr) continue;  // gone
      const shm::ProcessUse& use = region->processes[o.slot];
      if (use.move_done.load(std::memory_order_acquire) != o.sequence) {
        all = false;
        continue;
      }
      const uint32_t result = use.move_result.load(std::memory_order_relaxed);
      if (result == static_cast<uint32_t>(shm::MoveResult::kFailed)) failed = true;
      if (result == static_cast<uint32_t>(shm::MoveResult::kDeferred)) deferred = true;
      if (result != static_cast<uint32_t>(shm::MoveResult::kDone) &&
          result != static_cast<uint32_t>(shm::MoveResult::kShort) &&
          result != static_cast<uint32_t>(shm::MoveResult::kDeferred))
        failed = true;
      // The hook's word, bounded by what the process holds on the GPU.
      moved += std::min(use.moved_bytes.load(std::memory_order_relaxed),
                        use.charged[s.fast_gpu].load(std::memory_order_relaxed));
    }
    if (!all && now < s.moves_deadline) {
      wake = std::min({wake, s.moves_deadline, now + kPollPeriod});
      continue;
    }
    const bool timed_out = !all;
    const Suspension::Moves moves = s.moves;
    s.moves = Suspension::Moves::kNone;
    s.busy = false;
    const std::string name = segment_->tenants[t].name;
    // `now` is this step's; the operation may have begun later in the same step.
    const Nanos took = std::max(Nanos{0}, now - s.operation_started);
    if (moves == Suspension::Moves::kOut) {
      if (timed_out || failed) {
        // What did move stays moved and counts; the checkpoint takes the rest.
        const uint64_t more = moved > s.moved_out ? moved - s.moved_out : 0;
        s.moved_out = moved;
        preemption_.moved(t, moved);
        for (MemoryWait& w : memory_waits_)
          if (w.gpu == s.fast_gpu) w.freed += more;
        escalate(t, now, timed_out ? "its processes did not move their memory within the time allowed"
                                   : "a process's hook could not move its memory");
        continue;
      }
      // `moved` is all that is off the card now, a first move's and any later one's.
      const uint64_t more = moved > s.moved_out ? moved - s.moved_out : 0;
      s.moved_out = moved;
      s.bytes[s.fast_gpu] = moved;
      preemption_.moved(t, moved);
      for (MemoryWait& w : memory_waits_)
        if (w.gpu == s.fast_gpu) w.freed += more;
      preemption_.suspended(t, now);
      shm::Tenant& tenant = segment_->tenants[t];
      if (s.suspended_since == Nanos{0}) {
        s.suspended_since = now;
        s.suspended_ns_before = tenant.suspended_ns.load(std::memory_order_relaxed);
        tenant.suspensions.fetch_add(1, std::memory_order_relaxed);
      }
      tenant.suspend_ns.fetch_add(static_cast<uint64_t>(took.count()), std::memory_order_relaxed);
      tenant.gpu[s.fast_gpu].moved_mib.fetch_add(static_cast<uint32_t>(more >> 20), std::memory_order_relaxed);
      last_[t].path = "fast";
      last_[t].moved_out = moved;
      spdlog::info("tenant {} suspended: its processes moved {} of GPU {} to host memory in {:.2f} s", name,
                   describe_bytes(moved), s.fast_gpu, secs(took));
      decide_due_ = true;
    } else {
      SuspendOutcome o;
      o.job = SuspendJob::Kind::kResume;
      o.tenant = t;
      o.took = took;
      if (timed_out || failed || deferred) {
        // Nothing is lost: what did not come back stays in the processes' host memory, and
        // the resumption is tried again when the GPU has room.
        o.kind = SuspendOutcome::Kind::kDeferred;
        o.reason = timed_out ? "its processes did not answer in time"
                   : deferred ? "the GPU had no room for its memory yet"
                              : "a process's hook could not move its memory back";
      }
      s.hooks_released = true;
      on_resume_outcome(o, now);
    }
    publish_state(t);
  }
  return wake;
}

}  // namespace cuslice
