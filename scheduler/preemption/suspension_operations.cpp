// SuspensionOperations (suspension_operations.h): starting suspensions and resumptions,
// taking what they came to, and what follows.
#include "scheduler/preemption/suspension_operations.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "protocol/clock.h"
#include "protocol/futex.h"

namespace cuslice {

using Nanos = SuspensionOperations::Nanos;

namespace {

// How long a lock may wait for a process's driver calls in progress before the suspension is
// given up (the process keeps running).
constexpr unsigned kLockTimeoutMs = 10'000;

shm::Tenant::Preemption shm_state(SuspendState state) {
  switch (state) {
    case SuspendState::kRunning: return shm::Tenant::kRunning;
    case SuspendState::kSuspending: return shm::Tenant::kSuspending;
    case SuspendState::kSuspended: return shm::Tenant::kSuspended;
    case SuspendState::kResuming: return shm::Tenant::kResuming;
    case SuspendState::kFailed: return shm::Tenant::kSuspendFailed;
  }
  return shm::Tenant::kRunning;
}

// Nothing came back from the hooks' move back: an outcome as the suspender's would say it.
SuspendOutcome resumption(const FastWay::Answer& answer, Nanos took) {
  SuspendOutcome o;
  o.job = SuspendJob::Kind::kResume;
  o.tenant = answer.tenant;
  o.took = took;
  if (answer.timed_out || answer.failed || answer.deferred) {
    // Nothing is lost: what did not come back stays in the processes' host memory, and
    // the resumption is tried again when the GPU has room.
    o.kind = SuspendOutcome::Kind::kDeferred;
    o.reason = answer.timed_out  ? "its processes did not answer in time"
               : answer.deferred ? "the GPU had no room for its memory yet"
                                 : "a process's hook could not move its memory back";
  }
  return o;
}

}  // namespace

SuspensionOperations::SuspensionOperations(Options options, SharedSegment& segment, const TenantRegions& regions,
                                           const ProcessTable& processes, const TenantTable& tenants,
                                           const MemoryFacts& facts, MemoryPreemption& policy)
    : cuda_library_(std::move(options.cuda_library)),
      segment_(segment),
      tenants_(tenants),
      facts_(facts),
      policy_(policy),
      fast_(segment, regions, processes, tenants),
      outcomes_(segment, facts, policy),
      journal_(std::move(options.journal_path), segment) {}

void SuspensionOperations::load_driver(bool wanted) {
  if ((!wanted && journal_.entries().empty()) || checkpoint_api_) return;
  checkpoint_api_ = CheckpointApi::load(cuda_library_);
  if (checkpoint_api_->available()) {
    suspender_ = std::make_unique<TenantSuspender>(*checkpoint_api_, kLockTimeoutMs);
    spdlog::info("memory preemption: the driver's checkpoint API is available");
  } else {
    spdlog::warn("memory preemption is off: {}", checkpoint_api_->why());
  }
}

void SuspensionOperations::publish(uint32_t t) {
  uint32_t word = shm_state(policy_.state(t));
  if (segment_->tenants[t].state.load() != shm::Tenant::kFree && tenants_.preemptible(t)) word |= shm::Tenant::kPreemptible;
  std::atomic<uint32_t>& published = segment_->tenants[t].preemption;
  if (published.load(std::memory_order_relaxed) == word) return;
  published.store(word, std::memory_order_release);
  // Processes that joined the tenant while it was suspended wait on the word.
  futex_wake_all(&published);
}

void SuspensionOperations::republish(uint32_t t) {
  const uint32_t published = segment_->tenants[t].preemption.load(std::memory_order_relaxed) & shm::Tenant::kStateMask;
  if (published != shm_state(policy_.state(t))) publish(t);
}

uint64_t SuspensionOperations::suspended_mask() const {
  uint64_t mask = 0;
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t)
    if (policy_.state(t) == SuspendState::kSuspended) mask |= uint64_t{1} << t;
  return mask;
}

// --- Starting -------------------------------------------------------------------------------

void SuspensionOperations::suspend(uint32_t t, Nanos now, const std::vector<int32_t>& stop, uint64_t move,
                                   uint32_t gpu) {
  if (move > 0) {
    suspend_fast(t, now, gpu, move);
  } else {
    checkpoint(t, now, stop);
  }
}

void SuspensionOperations::checkpoint(uint32_t t, Nanos now, const std::vector<int32_t>& stop) {
  Suspension& s = suspensions_[t];
  // A tenant suspended the fast way whose rest is checkpointed now: its hooks go on holding
  // its work, and are told to go on after the restore.
  s = s.hooks_hold ? s.held_by_hooks() : Suspension{};
  s.operation_started = now;
  s.bytes.assign(shm::kMaxGpus, 0);
  s.processes = facts_.processes_of(t);
  for (Suspension::Process& p : s.processes) {
    p.stop = std::find(stop.begin(), stop.end(), p.pid) != stop.end();
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) s.bytes[g] += p.bytes[g];
  }
  s.busy = true;
  publish(t);
  // Journalled before the first driver call: a scheduler that dies now leaves processes that
  // may be locked or checkpointed, and the next one must find them.
  write_journal();
  SuspendJob job;
  job.kind = SuspendJob::Kind::kSuspend;
  job.tenant = t;
  job.processes = s.job_processes();
  job.stop = s.stop_processes();
  job.stop_refused = tenants_.config().scheduler.preemption.stop_unsuspendable;
  suspender_->submit(std::move(job));
}

void SuspensionOperations::suspend_fast(uint32_t t, Nanos now, uint32_t gpu, uint64_t bytes) {
  Suspension& s = suspensions_[t];
  // A tenant suspended the fast way already keeps its suspension: its hooks hold its work and
  // move more.
  if (!(s.fast && s.hooks_hold)) {
    s = Suspension{};
    s.bytes.assign(shm::kMaxGpus, 0);
    s.processes = facts_.processes_of(t);
    s.fast = true;
    s.hooks_hold = true;
    s.fast_gpu = gpu;
  }
  s.operation_started = now;
  order(t, FastWay::Moves::kOut, gpu, bytes, now);
}

void SuspensionOperations::order(uint32_t t, FastWay::Moves moves, uint32_t gpu, uint64_t bytes, Nanos now) {
  suspensions_[t].busy = true;
  fast_.order(t, moves, gpu, bytes, now);
  publish(t);
}

void SuspensionOperations::resume(uint32_t t, Nanos now) {
  Suspension& s = suspensions_[t];
  s.operation_started = now;
  spdlog::info("resuming tenant {}: {} back to the card", segment_->tenants[t].name, describe_bytes(s.total()));
  if (s.fast) {  // nothing was checkpointed: the hooks move it back
    order(t, FastWay::Moves::kBack, s.fast_gpu, s.moved_out, now);
    return;
  }
  s.busy = true;
  publish(t);
  SuspendJob job;
  job.kind = SuspendJob::Kind::kResume;
  job.tenant = t;
  job.processes = s.job_processes();
  suspender_->submit(std::move(job));
}

void SuspensionOperations::escalate(uint32_t t, Nanos now, const std::string& why) {
  spdlog::warn("tenant {}: {}; the driver's checkpoint takes the rest", segment_->tenants[t].name, why);
  policy_.escalate(t);
  suspensions_[t].fast = false;
  suspensions_[t].operation_started = now;
  checkpoint(t, now, {});
}

Nanos SuspensionOperations::suspend_joiners(uint32_t t, Nanos now) {
  Suspension& s = suspensions_[t];
  // Suspended the fast way: a process that joins holds no memory that moved, and its
  // allocations wait in its hook until the tenant runs again.
  if (s.busy || s.fast) return kNever;
  const bool stop = tenants_.config().scheduler.preemption.stop_unsuspendable;
  SuspendJob job;
  for (const ProcessRecord& rec : facts_.registered(t)) {
    const bool already = std::any_of(s.processes.begin(), s.processes.end(),
                                     [&](const Suspension::Process& p) { return p.pid == rec.pid; });
    if (already || s.join_skipped.count(rec.pid)) continue;
    const bool claims = rec.checkpoint_claims != 0;  // said on its own connection
    if (claims && !stop) continue;  // `keep`: left to run, reported
    (claims ? job.stop : job.processes).push_back({rec.pid, rec.start_time});
  }
  if (job.processes.empty() && job.stop.empty()) return kNever;
  // Those the driver knew nothing of at the last look wait in their hooks: looked at again a
  // little later, not at every step.
  if (now < s.next_join_check) return s.next_join_check;
  job.kind = SuspendJob::Kind::kSuspend;
  job.tenant = t;
  job.join = true;
  job.stop_refused = stop;
  s.joining = job.processes;
  s.busy = true;
  policy_.hold(t, true);  // a resumption now would leave them out
  suspender_->submit(std::move(job));
  return kNever;
}

// --- Taking what they came to ---------------------------------------------------------------

Progress SuspensionOperations::poll(Nanos now) {
  FastWay::Answers answers = fast_.poll(now);
  Progress progress;
  progress.wake = answers.wake;
  for (const FastWay::Answer& answer : answers.done) take(answer, now, progress);
  return progress;
}

void SuspensionOperations::take(const FastWay::Answer& answer, Nanos now, Progress& progress) {
  const uint32_t t = answer.tenant;
  Suspension& s = suspensions_[t];
  s.busy = false;
  // `now` is this step's; the operation may have begun later in the same step.
  const Nanos took = std::max(Nanos{0}, now - s.operation_started);
  if (answer.moves == FastWay::Moves::kBack) {
    s.hooks_released = true;
    resumed(resumption(answer, took), now);
  } else {
    const uint64_t more = outcomes_.moved(t, s, answer.moved);
    progress.freed[s.fast_gpu] += more;
    if (answer.timed_out || answer.failed) {
      escalate(t, now, answer.timed_out ? "its processes did not move their memory within the time allowed"
                                        : "a process's hook could not move its memory");
      return;
    }
    outcomes_.fast_suspended(t, s, more, took, now);
    progress.decide = true;
  }
  publish(t);
}

void SuspensionOperations::resumed(const SuspendOutcome& outcome, Nanos now) {
  Suspension& s = suspensions_[outcome.tenant];
  if (outcomes_.resumed(outcome, s, now)) order(outcome.tenant, FastWay::Moves::kBack, s.fast_gpu, s.moved_out, now);
}

Progress SuspensionOperations::take_outcomes() {
  Progress progress;
  if (!suspender_) return progress;
  const Nanos now = Nanos{now_ns()};
  for (const SuspendOutcome& o : suspender_->take()) {
    const uint32_t t = o.tenant;
    Suspension& s = suspensions_[t];
    s.busy = false;
    outcomes_.note(o);
    if (o.join) {
      outcomes_.joined(o, s, now);
    } else if (o.job == SuspendJob::Kind::kSuspend) {
      const std::vector<uint64_t> freed = outcomes_.checkpointed(o, s, now);
      for (uint32_t g = 0; g < shm::kMaxGpus; ++g) progress.freed[g] += freed[g];
    } else {
      resumed(o, now);
    }
    publish(t);
  }
  write_journal();
  progress.decide = true;  // at the step that follows
  return progress;
}

Nanos SuspensionOperations::tend(Nanos now) {
  Nanos wake = kNever;
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    // A suspended tenant whose processes all exited is forgotten by the policy: nothing is
    // left to resume.
    Suspension& s = suspensions_[t];
    if (policy_.state(t) == SuspendState::kRunning && !s.processes.empty() && !s.busy) {
      spdlog::info("tenant {}: every suspended process exited", segment_->tenants[t].name);
      s = Suspension{};
      write_journal();
    }
    republish(t);
    if (policy_.state(t) == SuspendState::kSuspended) wake = std::min(wake, suspend_joiners(t, now));
  }
  return wake;
}

void SuspensionOperations::tick(Nanos now) {
  // A process that registered into a suspended tenant (a registration is no scheduling step)
  // is found within a tick.
  if (suspender_) {
    for (uint32_t t = 0; t < shm::kMaxTenants; ++t)
      if (policy_.state(t) == SuspendState::kSuspended) suspend_joiners(t, now);  // the next tick looks again
  }
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    const Suspension& s = suspensions_[t];
    const SuspendState state = policy_.state(t);
    if (state != SuspendState::kSuspended && state != SuspendState::kResuming && state != SuspendState::kFailed) continue;
    if (s.suspended_since == Nanos{0}) continue;
    segment_->tenants[t].suspended_ns.store(s.suspended_ns_before + static_cast<uint64_t>((now - s.suspended_since).count()),
                                            std::memory_order_relaxed);
  }
}

// --- What an earlier daemon left ------------------------------------------------------------

void SuspensionOperations::adopt_journal() {
  if (journal_.entries().empty()) return;
  const Nanos now = Nanos{now_ns()};
  policy_.update(facts_.tenants(suspensions_));
  for (const JournalEntry& entry : journal_.entries())
    if (std::optional<JournalKeeper::Found> found = journal_.still_suspended(entry, checkpoint_api_.get()))
      adopt(*found, entry.tenant, now);
  journal_.forget_entries();
  write_journal();
}

void SuspensionOperations::adopt(const JournalKeeper::Found& found, const std::string& name, Nanos now) {
  const uint32_t t = found.tenant;
  Suspension& s = suspensions_[t];
  s = Suspension{};
  s.processes = found.processes;
  s.bytes.assign(shm::kMaxGpus, 0);
  for (const auto& p : s.processes)
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) s.bytes[g] += p.bytes[g];
  s.suspended_since = now;
  s.suspended_ns_before = segment_->tenants[t].suspended_ns.load(std::memory_order_relaxed);
  policy_.update(facts_.tenants(suspensions_));
  policy_.adopt_suspended(t, now, "left suspended by an earlier scheduler; resumed once its memory is free");
  publish(t);
  spdlog::warn("tenant {}: {} processes left suspended by an earlier scheduler ({}); they are resumed once "
               "their memory is free",
               name, s.processes.size(), describe_bytes(s.total()));
}

}  // namespace cuslice
