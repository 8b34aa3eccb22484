// MemoryRequests (memory_requests.h): keeping, deciding and answering the requests for room.
#include "scheduler/preemption/memory_requests.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "protocol/clock.h"
#include "protocol/futex.h"

namespace cuslice {

using Nanos = MemoryRequests::Nanos;

namespace {

double secs(Nanos n) { return static_cast<double>(n.count()) / 1e9; }

}  // namespace

MemoryRequests::MemoryRequests(SharedSegment& segment, const MemoryFacts& facts, MemoryPreemption& policy,
                               SuspensionOperations& operations)
    : segment_(segment), facts_(facts), policy_(policy), operations_(operations) {}

void MemoryRequests::answer(uint32_t slot, uint32_t sequence, shm::MemoryDecision decision) {
  std::atomic<uint32_t>& word = segment_->processes[slot].memory_decision;
  word.store((sequence << 8) | static_cast<uint32_t>(decision), std::memory_order_release);
  futex_wake_all(&word);
}

bool MemoryRequests::too_many(uint32_t slot, uid_t uid) const {
  // Pending requests are bounded per process, per user and overall, so that no user can
  // make the decisions (and the loop) slow for everybody: past a bound, a request is refused.
  const auto pending_of = [&](auto same) { return std::count_if(waits_.begin(), waits_.end(), same); };
  return waits_.size() >= kMaxWaits || pending_of([&](const Wait& m) { return m.slot == slot; }) >= kMaxWaitsPerProcess ||
         pending_of([&](const Wait& m) { return m.uid == uid; }) >= kMaxWaitsPerUid;
}

void MemoryRequests::on_request(const ProcessRecord& process, const wire::MemoryRequest& request) {
  if (request.sequence == 0) return;
  const uint32_t slot = process.slot;
  const uint32_t sequence = request.sequence & 0xFFFFFF;
  const uint64_t wait = segment_->allocation_wait_ns.load(std::memory_order_relaxed);
  if (request.gpu >= shm::kMaxGpus || wait == 0 || too_many(slot, process.uid)) {
    answer(slot, sequence, shm::MemoryDecision::kRefused);
    return;
  }
  const Nanos asked{now_ns()};
  waits_.push_back({slot, process.pid, process.uid, process.tenant, request.gpu, sequence, request.bytes,
                    request.free_bytes, 0, false, asked, asked + Nanos(wait)});
  // Decided at the next step, once for every request of this wake-up.
  due_ = true;
}

void MemoryRequests::forget(uint32_t slot) {
  std::erase_if(waits_, [&](const Wait& w) { return w.slot == slot; });
}

void MemoryRequests::credit(const std::vector<uint64_t>& freed) {
  for (Wait& w : waits_) w.freed += freed[w.gpu];
}

void MemoryRequests::decide() {
  due_ = false;
  if (waits_.empty()) return;
  const Nanos now = Nanos{now_ns()};
  policy_.update(facts_.tenants(operations_.suspensions()));
  // The system's facts once per pass, not once per request: /proc/meminfo and the tenants'
  // counters say the same for every wait decided now.
  const std::vector<GpuMemory> card = facts_.gpus(policy_);
  const uint64_t host = facts_.host_available();
  std::vector<Wait> still;
  for (Wait& w : waits_) {
    if (now >= w.deadline) continue;  // the hook gave up already
    if (const std::optional<std::string> why = unfounded(w, card[w.gpu].total)) {
      settle(w, refusal(w, *why), now);
      continue;
    }
    std::vector<GpuMemory> gpus = card;
    // On the GPU asked for: what the driver said was free, plus what suspensions freed since.
    // The daemon's own account cannot see memory held outside the hooks; the driver's can. A
    // figure above the card's size is nobody's free memory.
    const uint64_t reported = card[w.gpu].total != 0 ? std::min(w.reported_free, card[w.gpu].total) : w.reported_free;
    gpus[w.gpu].free = reported + w.freed;
    if (settle(w, policy_.request({w.tenant, w.gpu, w.bytes}, gpus, host, now), now)) still.push_back(w);
  }
  waits_ = std::move(still);
}

std::optional<std::string> MemoryRequests::unfounded(const Wait& w, uint64_t card_total) const {
  // A request is the asker's word: one no allocation of its could need (more than the card
  // holds, or than its whole quota, which its hook enforces before it asks) suspends nobody.
  if (card_total != 0 && w.bytes > card_total)
    return "asks for " + describe_bytes(w.bytes) + ", more than the card holds (" + describe_bytes(card_total) + ")";
  if (const std::optional<uint64_t> quota = facts_.quota(w.tenant, w.gpu); quota && w.bytes > *quota)
    return "asks for " + describe_bytes(w.bytes) + ", more than its quota (" + describe_bytes(*quota) + ")";
  return std::nullopt;
}

Verdict MemoryRequests::refusal(const Wait& w, const std::string& why) const {
  Verdict v;
  v.kind = Verdict::Kind::kRefused;
  v.reason = segment_->tenants[w.tenant].name + std::string(" ") + why + ": nobody is suspended for it";
  return v;
}

bool MemoryRequests::settle(Wait& w, const Verdict& v, Nanos now) {
  switch (v.kind) {
    case Verdict::Kind::kFits:
      if (w.freed > 0) {
        spdlog::info("{}: room made in {:.2f} s", v.reason, secs(now - w.asked));
        time_to_room_[w.tenant] = now - w.asked;
      }
      answer(w.slot, w.sequence, shm::MemoryDecision::kRetry);
      return false;
    case Verdict::Kind::kRefused:
      spdlog::info("pid {}: {}", w.pid, v.reason);
      last_refusal_[w.tenant] = v.reason;
      answer(w.slot, w.sequence, shm::MemoryDecision::kRefused);
      return false;
    case Verdict::Kind::kSuspend:
      spdlog::info("{}", v.reason);
      for (size_t i = 0; i < v.suspend.size(); ++i)
        operations_.suspend(v.suspend[i], now, v.stop, i < v.move.size() ? v.move[i] : 0, w.gpu);
      return true;
    case Verdict::Kind::kWait:
      if (!w.waiting) spdlog::info("pid {}: {}", w.pid, v.reason);
      w.waiting = true;
      return true;
  }
  return true;
}

Nanos MemoryRequests::earliest_deadline() const {
  Nanos earliest = kNever;
  for (const Wait& w : waits_) earliest = std::min(earliest, w.deadline);
  return earliest;
}

std::vector<uint64_t> MemoryRequests::pending(Nanos now) const {
  std::vector<uint64_t> bytes(shm::kMaxGpus, 0);
  for (const Wait& w : waits_)
    if (w.deadline > now) bytes[w.gpu] += w.bytes;
  return bytes;
}

void MemoryRequests::drop_expired(Nanos now) {
  std::erase_if(waits_, [&](const Wait& w) { return w.deadline <= now; });
}

const std::string* MemoryRequests::last_refusal(uint32_t t) const {
  auto it = last_refusal_.find(t);
  return it == last_refusal_.end() ? nullptr : &it->second;
}

}  // namespace cuslice
