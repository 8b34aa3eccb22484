// Preemptor (preemptor.h): configuration, requests for room and the decisions on them,
// starting suspensions and resumptions, the claims processes make, the report and the
// journal. What the suspender's jobs came to is suspension_outcomes.cpp's.
#include "scheduler/preemption/preemptor.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "protocol/clock.h"
#include "protocol/futex.h"
#include "protocol/saturating.h"
#include "scheduler/os/process_info.h"
#include "scheduler/preemption/host_memory.h"

namespace cuslice {

using Nanos = Preemptor::Nanos;

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

double secs(Nanos n) { return static_cast<double>(n.count()) / 1e9; }

}  // namespace

Preemptor::Preemptor(PreemptionOptions options, SharedSegment& segment, TenantRegions& regions,
                     const ProcessTable& processes, const TenantTable& tenants)
    : options_(std::move(options)),
      segment_(segment),
      regions_(regions),
      processes_(processes),
      tenants_(tenants),
      journal_(options_.journal_path) {}

void Preemptor::configure() {
  const Config& config = tenants_.config();
  PreemptionParams params;
  params.resume_holdoff = config.scheduler.preemption.resume_holdoff;
  params.host_reserve = config.scheduler.preemption.host_reserve;
  params.resume_margin = config.scheduler.preemption.resume_margin;
  params.stop_unsuspendable = config.scheduler.preemption.stop_unsuspendable;
  params.fast = config.scheduler.preemption.fast;
  preemption_.reconfigure(params);
  const bool wanted = std::any_of(config.tenants.begin(), config.tenants.end(),
                                  [](const TenantConfig& t) { return t.preemptible; });
  // The driver is loaded when a preemptible tenant first appears, not before: a node without
  // preemption never opens libcuda in the daemon.
  if ((wanted || !journal_entries_.empty()) && !checkpoint_api_) {
    checkpoint_api_ = CheckpointApi::load(options_.cuda_library);
    if (checkpoint_api_->available()) {
      suspender_ = std::make_unique<TenantSuspender>(*checkpoint_api_, kLockTimeoutMs);
      spdlog::info("memory preemption: the driver's checkpoint API is available");
    } else {
      spdlog::warn("memory preemption is off: {}", checkpoint_api_->why());
    }
  }
  const bool on = wanted && suspender_ != nullptr;
  write_move_policies();
  segment_->allocation_wait_ns.store(on ? static_cast<uint64_t>(config.scheduler.preemption.allocation_wait.count()) : 0,
                                     std::memory_order_relaxed);
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) publish_state(t);
}

std::vector<PreemptTenant> Preemptor::preempt_tenants() const {
  std::vector<PreemptTenant> out(shm::kMaxTenants);
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    if (!tenants_.present(t) && segment_->tenants[t].state.load() != shm::Tenant::kRetired) continue;
    PreemptTenant& pt = out[t];
    pt.present = true;
    pt.name = segment_->tenants[t].name;
    pt.priority = tenants_.priority(t);
    pt.preemptible = preemptible(t);
    // A quota that is not preemptible is a guarantee, the file's or one the device plugin sold.
    const shm::Tenant& st = segment_->tenants[t];
    pt.guaranteed = !pt.preemptible && (st.memory_quota.load(std::memory_order_relaxed) != shm::kUnlimited ||
                                        st.memory_quota_ppm.load(std::memory_order_relaxed) != 0);
  }
  std::set<int32_t> registered;
  for (const ProcessRecord& rec : processes_.all()) {
    const uint32_t t = rec.tenant;  // the daemon's own record
    const shm::TenantRegion* region = regions_.get(t);
    if (t >= shm::kMaxTenants || !out[t].present || region == nullptr) continue;
    // What the process said of itself on its own connection: a claim about its own tenant
    // only, which never spares the tenant unless `unsuspendable: keep` (memory_preemption.h).
    const shm::ProcessUse& use = region->processes[rec.slot];
    PreemptProcess p;
    p.pid = rec.pid;
    p.start_time = rec.start_time;
    p.gpu_bytes.resize(shm::kMaxGpus);
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) p.gpu_bytes[g] = use.charged[g].load(std::memory_order_relaxed);
    const uint32_t flags = rec.checkpoint_claims;
    p.ipc = (flags & shm::ProcessSlot::kUsesIpc) != 0;
    p.managed = (flags & shm::ProcessSlot::kUsesManaged) != 0;
    p.mps = (flags & shm::ProcessSlot::kUsesMps) != 0;
    // The fast way's figures, as the process's hook reports them (the tenant's word).
    p.movable = (use.move_flags.load(std::memory_order_acquire) & shm::ProcessUse::kMovable) != 0 &&
                (segment_->processes[rec.slot].move_policy.load(std::memory_order_relaxed) &
                 shm::ProcessSlot::kFastAllowed) != 0;
    p.movable_bytes = use.movable_bytes.load(std::memory_order_relaxed);
    p.pool_bytes = use.pool_bytes.load(std::memory_order_relaxed);
    out[t].processes.push_back(std::move(p));
    registered.insert(rec.pid);
  }
  // Processes an earlier daemon suspended that have not registered again (their threads wait
  // inside the driver): they are the tenant's too, with the memory the journal recorded.
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    if (!out[t].present) continue;
    for (const Suspension::Process& p : suspensions_[t].processes) {
      if (!p.adopted || registered.count(p.pid)) continue;
      PreemptProcess pp;
      pp.pid = p.pid;
      pp.start_time = p.start_time;
      pp.gpu_bytes = p.bytes;
      out[t].processes.push_back(std::move(pp));
    }
  }
  return out;
}

std::vector<GpuMemory> Preemptor::gpu_memory() const {
  std::vector<GpuMemory> gpus(shm::kMaxGpus);
  const std::optional<uint64_t> configured = tenants_.config().scheduler.gpu_memory;
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    uint64_t total = card_[g];
    if (total == 0 && configured) total = *configured;
    uint64_t used = 0;
    for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
      const shm::TenantRegion* region = regions_.get(t);
      if (segment_->tenants[t].state.load() == shm::Tenant::kFree || region == nullptr) continue;
      // The tenant's live counter, which its processes can set to anything: saturated, so a
      // huge value makes the card look full rather than wrap around to look empty. A suspended
      // tenant holds nothing on the card, or, suspended the fast way, what did not move.
      const uint64_t tenant_used = region->gpu[g].memory_used.load(std::memory_order_relaxed);
      used = saturating_add(used, tenant_used - preemption_.off_card(t, g, tenant_used));
    }
    gpus[g] = {total, total > used ? total - used : 0};
  }
  return gpus;
}

uint64_t Preemptor::host_available() const {
  const std::optional<uint64_t> available = read_mem_available(options_.meminfo_path);
  if (!available) spdlog::warn("cannot read MemAvailable from {}: nothing can be suspended", options_.meminfo_path);
  return available.value_or(0);
}

void Preemptor::publish_state(uint32_t t) {
  uint32_t word = shm_state(preemption_.state(t));
  if (segment_->tenants[t].state.load() != shm::Tenant::kFree && preemptible(t)) word |= shm::Tenant::kPreemptible;
  std::atomic<uint32_t>& published = segment_->tenants[t].preemption;
  if (published.load(std::memory_order_relaxed) == word) return;
  published.store(word, std::memory_order_release);
  // Processes that joined the tenant while it was suspended wait on the word.
  futex_wake_all(&published);
}

void Preemptor::republish_state(uint32_t t) {
  const uint32_t published = segment_->tenants[t].preemption.load(std::memory_order_relaxed) & shm::Tenant::kStateMask;
  if (published != shm_state(preemption_.state(t))) publish_state(t);
}

void Preemptor::answer(uint32_t slot, uint32_t sequence, shm::MemoryDecision decision) {
  std::atomic<uint32_t>& word = segment_->processes[slot].memory_decision;
  word.store((sequence << 8) | static_cast<uint32_t>(decision), std::memory_order_release);
  futex_wake_all(&word);
}

void Preemptor::on_memory_request(const ProcessRecord& process, const wire::MemoryRequest& request) {
  if (request.sequence == 0) return;
  const uint32_t slot = process.slot;
  const uint32_t sequence = request.sequence & 0xFFFFFF;
  const uint64_t wait = segment_->allocation_wait_ns.load(std::memory_order_relaxed);
  if (request.gpu >= shm::kMaxGpus || wait == 0) {
    answer(slot, sequence, shm::MemoryDecision::kRefused);
    return;
  }
  // Pending requests are bounded per process, per user and overall, so that no user can
  // make the decisions (and the loop) slow for everybody: past a bound, a request is refused.
  const auto pending_of = [&](auto same) {
    return std::count_if(memory_waits_.begin(), memory_waits_.end(), same);
  };
  if (memory_waits_.size() >= kMaxWaits ||
      pending_of([&](const MemoryWait& m) { return m.slot == slot; }) >= kMaxWaitsPerProcess ||
      pending_of([&](const MemoryWait& m) { return m.uid == process.uid; }) >= kMaxWaitsPerUid) {
    answer(slot, sequence, shm::MemoryDecision::kRefused);
    return;
  }
  MemoryWait w;
  w.slot = slot;
  w.pid = process.pid;
  w.uid = process.uid;
  w.tenant = process.tenant;
  w.gpu = request.gpu;
  w.sequence = sequence;
  w.bytes = request.bytes;
  w.reported_free = request.free_bytes;
  w.asked = Nanos{now_ns()};
  w.deadline = w.asked + Nanos(wait);
  memory_waits_.push_back(w);
  // Decided at the next step, once for every request of this wake-up.
  decide_due_ = true;
}

void Preemptor::decide_memory_waits() {
  decide_due_ = false;
  if (memory_waits_.empty()) return;
  const Nanos now = Nanos{now_ns()};
  preemption_.update(preempt_tenants());
  // The system's facts once per pass, not once per request: /proc/meminfo and the tenants'
  // counters say the same for every wait decided now.
  const std::vector<GpuMemory> card = gpu_memory();
  const uint64_t host = host_available();
  std::vector<MemoryWait> still;
  for (MemoryWait& w : memory_waits_) {
    if (now >= w.deadline) continue;  // the hook gave up already
    std::vector<GpuMemory> gpus = card;
    // On the GPU asked for: what the driver said was free, plus what suspensions freed since.
    // The daemon's own account cannot see memory held outside the hooks; the driver's can.
    gpus[w.gpu].free = w.reported_free + w.freed;
    const Verdict v = preemption_.request({w.tenant, w.gpu, w.bytes}, gpus, host, now);
    switch (v.kind) {
      case Verdict::Kind::kFits:
        if (w.freed > 0) {
          spdlog::info("{}: room made in {:.2f} s", v.reason, secs(now - w.asked));
          last_[w.tenant].time_to_room = now - w.asked;
        }
        answer(w.slot, w.sequence, shm::MemoryDecision::kRetry);
        continue;
      case Verdict::Kind::kRefused:
        spdlog::info("pid {}: {}", w.pid, v.reason);
        last_refusal_[w.tenant] = v.reason;
        answer(w.slot, w.sequence, shm::MemoryDecision::kRefused);
        continue;
      case Verdict::Kind::kSuspend:
        spdlog::info("{}", v.reason);
        for (size_t i = 0; i < v.suspend.size(); ++i)
          start_suspension(v.suspend[i], now, v.stop, i < v.move.size() ? v.move[i] : 0, w.gpu);
        break;
      case Verdict::Kind::kWait:
        if (!w.waiting) spdlog::info("pid {}: {}", w.pid, v.reason);
        w.waiting = true;
        break;
    }
    still.push_back(w);
  }
  memory_waits_ = std::move(still);
}

std::vector<uint64_t> Preemptor::charged(uint32_t t, uint32_t slot) const {
  std::vector<uint64_t> bytes(shm::kMaxGpus, 0);
  if (const shm::TenantRegion* region = regions_.get(t))
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g)
      bytes[g] = region->processes[slot].charged[g].load(std::memory_order_relaxed);
  return bytes;
}

void Preemptor::start_suspension(uint32_t t, Nanos now, const std::vector<int32_t>& stop, uint64_t move,
                                 uint32_t gpu) {
  if (move > 0) {
    start_fast_suspension(t, now, gpu, move);
    return;
  }
  Suspension& s = suspensions_[t];
  // A tenant suspended the fast way whose rest is checkpointed now: its hooks go on holding
  // its work, and are told to go on after the restore.
  const Suspension before = s.hooks_hold ? s : Suspension{};
  s = Suspension{};
  if (before.hooks_hold) {
    s.hooks_hold = true;
    s.fast_gpu = before.fast_gpu;
    s.moved_out = before.moved_out;
    s.suspended_since = before.suspended_since;
    s.suspended_ns_before = before.suspended_ns_before;
  }
  s.operation_started = now;
  s.bytes.assign(shm::kMaxGpus, 0);
  for (const ProcessRecord& rec : processes_.all()) {
    if (rec.tenant != t || regions_.get(t) == nullptr) continue;
    Suspension::Process p;
    p.pid = rec.pid;
    p.stop = std::find(stop.begin(), stop.end(), rec.pid) != stop.end();
    p.start_time = rec.start_time;
    // As the process says (its tenant's region): what the tenant is said to give back.
    p.bytes = charged(t, rec.slot);
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) s.bytes[g] += p.bytes[g];
    s.processes.push_back(std::move(p));
  }
  s.busy = true;
  publish_state(t);
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

void Preemptor::resume(uint32_t t, Nanos now) {
  Suspension& s = suspensions_[t];
  s.operation_started = now;
  spdlog::info("resuming tenant {}: {} back to the card", segment_->tenants[t].name, describe_bytes(s.total()));
  if (s.fast) {  // nothing was checkpointed: the hooks move it back
    start_fast_resume(t, now);
    return;
  }
  s.busy = true;
  publish_state(t);
  SuspendJob job;
  job.kind = SuspendJob::Kind::kResume;
  job.tenant = t;
  job.processes = s.job_processes();
  suspender_->submit(std::move(job));
}

void Preemptor::note_claims() {
  const bool stop = tenants_.config().scheduler.preemption.stop_unsuspendable;
  for (const ProcessRecord& rec : processes_.all()) {
    const shm::TenantRegion* region = regions_.get(rec.tenant);
    if (region == nullptr) continue;
    const uint32_t flags = rec.checkpoint_claims;
    if (flags == 0 || !preemptible(rec.tenant)) continue;
    if (claims_logged_.count({rec.pid, rec.start_time})) continue;
    // Forget the processes that left before remembering one more.
    std::erase_if(claims_logged_, [&](const std::pair<int32_t, uint64_t>& seen) {
      return std::none_of(processes_.all().begin(), processes_.all().end(),
                          [&](const ProcessRecord& p) { return p.pid == seen.first; });
    });
    claims_logged_.emplace(rec.pid, rec.start_time);
    PreemptProcess p;
    p.ipc = (flags & shm::kUsesIpc) != 0;
    p.managed = (flags & shm::kUsesManaged) != 0;
    p.mps = (flags & shm::kUsesMps) != 0;
    const char* what = describe_claim(p);
    spdlog::warn("tenant {} is preemptible, and its pid {} says it uses {}, which the driver's checkpoint cannot "
                 "move: {}",
                 segment_->tenants[rec.tenant].name, rec.pid, what ? what : "something",
                 stop ? "it is stopped (SIGKILL), not suspended, when the tenant's memory is needed "
                        "(preemption.unsuspendable: stop)"
                      : "the tenant is not suspended while it runs (preemption.unsuspendable: keep)");
  }
}

Nanos Preemptor::step(Nanos now) {
  if (!suspender_) return kNever;
  const Nanos moves_wake = poll_moves(now);
  if (decide_due_) decide_memory_waits();
  note_claims();
  bool any = !memory_waits_.empty();
  for (uint32_t t = 0; t < shm::kMaxTenants && !any; ++t) any = preemption_.state(t) != SuspendState::kRunning;
  if (!any) {
    // What the last update left (a suspended tenant whose processes all left is running
    // again) is what hooks waiting on the word must see.
    for (uint32_t t = 0; t < shm::kMaxTenants; ++t) republish_state(t);
    return kNever;
  }
  preemption_.update(preempt_tenants());
  Nanos wake = kNever;
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    // A suspended tenant whose processes all exited is forgotten by the policy: nothing is
    // left to resume.
    Suspension& s = suspensions_[t];
    if (preemption_.state(t) == SuspendState::kRunning && !s.processes.empty() && !s.busy) {
      spdlog::info("tenant {}: every suspended process exited", segment_->tenants[t].name);
      s = Suspension{};
      write_journal();
    }
    republish_state(t);
    if (preemption_.state(t) == SuspendState::kSuspended) wake = std::min(wake, suspend_joiners(t, now));
  }
  std::vector<uint64_t> pending(shm::kMaxGpus, 0);
  for (const MemoryWait& w : memory_waits_) {
    if (w.deadline > now) pending[w.gpu] += w.bytes;
    wake = std::min(wake, w.deadline);
  }
  const MemoryPreemption::Resumption r = preemption_.step(gpu_memory(), pending, now);
  for (uint32_t t : r.resume) resume(t, now);
  // Drop the waits whose hooks gave up.
  std::erase_if(memory_waits_, [&](const MemoryWait& w) { return w.deadline <= now; });
  return std::min({wake, r.wake_at, moves_wake, poll_moves(now)});
}

uint64_t Preemptor::suspended_mask() const {
  uint64_t mask = 0;
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t)
    if (suspended(t)) mask |= uint64_t{1} << t;
  return mask;
}

void Preemptor::publish_suspended_time(Nanos now) {
  // At every statistics tick, with or without scheduling steps: a claim shows in the log soon,
  // and a process that registered into a suspended tenant (a registration is no scheduling
  // step) is found within a tick.
  if (suspender_) {
    note_claims();
    for (uint32_t t = 0; t < shm::kMaxTenants; ++t)
      if (preemption_.state(t) == SuspendState::kSuspended) suspend_joiners(t, now);  // the next tick looks again
  }
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    const Suspension& s = suspensions_[t];
    const SuspendState state = preemption_.state(t);
    if (state != SuspendState::kSuspended && state != SuspendState::kResuming && state != SuspendState::kFailed) continue;
    if (s.suspended_since == Nanos{0}) continue;
    segment_->tenants[t].suspended_ns.store(s.suspended_ns_before + static_cast<uint64_t>((now - s.suspended_since).count()),
                                            std::memory_order_relaxed);
  }
}

void Preemptor::forget_memory_waits_of(uint32_t slot) {
  std::erase_if(memory_waits_, [&](const MemoryWait& w) { return w.slot == slot; });
}

std::vector<std::string> Preemptor::report() const {
  std::vector<std::string> lines;
  const std::vector<PreemptTenant> tenants = preempt_tenants();
  const bool stop = tenants_.config().scheduler.preemption.stop_unsuspendable;
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    if (segment_->tenants[t].state.load() == shm::Tenant::kFree) continue;
    const SuspendState state = preemption_.state(t);
    std::string reason = preemption_.reason(t);
    // What a preemptible tenant's processes say of themselves is reported while they run.
    std::string claims = tenants[t].preemptible ? describe_claims(tenants[t]) : "";
    if (!claims.empty()) {
      claims += stop ? ": stopped rather than suspended when its memory is needed (unsuspendable: stop)"
                     : ": the tenant is never suspended while it runs (unsuspendable: keep)";
    }
    // The fast way's figures, on a line of their own that a `cuslice` which does not know them
    // reads as a tenant named "@facts" (no tenant name has an "@").
    const LastSuspension& last = last_[t];
    if (tenants[t].preemptible || last.time_to_room.count() > 0) {
      uint64_t pool = 0, movable = 0;
      for (const PreemptProcess& p : tenants[t].processes) {
        pool += p.pool_bytes;
        movable += p.movable ? p.movable_bytes : 0;
      }
      lines.push_back(std::string("@facts\t") + segment_->tenants[t].name + "\t" + (*last.path ? last.path : "-") + "\t" +
                      std::to_string(last.moved_out) + "\t" + std::to_string(pool) + "\t" + std::to_string(movable) +
                      "\t" + std::to_string(last.time_to_room.count()));
    }
    auto refusal = last_refusal_.find(t);
    if (state == SuspendState::kRunning && reason.empty() && claims.empty() && refusal == last_refusal_.end()) continue;
    if (state == SuspendState::kRunning && reason.empty()) {
      reason = claims;
      if (refusal != last_refusal_.end())
        reason += (reason.empty() ? "" : "; ") + std::string("last request refused: ") + refusal->second;
    }
    lines.push_back(std::string(segment_->tenants[t].name) + "\t" + to_string(state) + "\t" + reason);
  }
  return lines;
}

std::map<std::string, Preemptor::Figures> Preemptor::figures() const {
  std::map<std::string, Figures> out;
  const std::vector<PreemptTenant> tenants = preempt_tenants();
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    if (!tenants[t].present) continue;
    Figures f;
    f.fast = std::string(last_[t].path) == "fast";
    f.moved_out = last_[t].moved_out;
    f.time_to_room = secs(last_[t].time_to_room);
    for (const PreemptProcess& p : tenants[t].processes) f.host_pool += p.pool_bytes;
    out[tenants[t].name] = f;
  }
  return out;
}

// --- The journal ------------------------------------------------------------------------------

void Preemptor::write_journal() const {
  std::vector<JournalEntry> entries;
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    const SuspendState state = preemption_.state(t);
    if (state == SuspendState::kRunning || suspensions_[t].processes.empty()) continue;
    JournalEntry e{segment_->tenants[t].name, to_string(state), preemption_.reason(t), {}};
    for (const Suspension::Process& p : suspensions_[t].processes) e.processes.push_back({p.pid, p.start_time, p.bytes});
    entries.push_back(std::move(e));
  }
  journal_.write(entries);
}

void Preemptor::read_journal() { journal_entries_ = journal_.read(); }

void Preemptor::adopt_journal() {
  if (journal_entries_.empty()) return;
  const Nanos now = Nanos{now_ns()};
  preemption_.update(preempt_tenants());
  for (const JournalEntry& entry : journal_entries_) {
    uint32_t t = shm::kMaxTenants;
    for (uint32_t i = 0; i < shm::kMaxTenants; ++i)
      if (segment_->tenants[i].state.load() != shm::Tenant::kFree && entry.tenant == segment_->tenants[i].name) t = i;
    std::vector<Suspension::Process> found;
    for (const JournalEntry::Process& p : entry.processes) {
      Suspension::Process sp;
      sp.pid = p.pid;
      sp.start_time = p.start_time;
      sp.bytes = p.bytes;
      sp.bytes.resize(shm::kMaxGpus);
      sp.adopted = true;
      if (sp.pid <= 0 || process_start_time(sp.pid) != sp.start_time) continue;  // gone
      const CheckpointApi::State state = checkpoint_api_ ? checkpoint_api_->state(sp.pid) : CheckpointApi::State::kGone;
      if (state != CheckpointApi::State::kLocked && state != CheckpointApi::State::kCheckpointed) continue;
      found.push_back(std::move(sp));
    }
    if (found.empty()) continue;
    if (t == shm::kMaxTenants) {
      for (const auto& p : found)
        spdlog::error("pid {} of tenant {} was left suspended by an earlier scheduler, and the tenant is not in the "
                      "configuration: resume it with `cuda-checkpoint --toggle --pid {}`",
                      p.pid, entry.tenant, p.pid);
      continue;
    }
    Suspension& s = suspensions_[t];
    s = Suspension{};
    s.processes = std::move(found);
    s.bytes.assign(shm::kMaxGpus, 0);
    for (const auto& p : s.processes)
      for (uint32_t g = 0; g < shm::kMaxGpus; ++g) s.bytes[g] += p.bytes[g];
    s.suspended_since = now;
    s.suspended_ns_before = segment_->tenants[t].suspended_ns.load(std::memory_order_relaxed);
    preemption_.update(preempt_tenants());
    preemption_.adopt_suspended(t, now, "left suspended by an earlier scheduler; resumed once its memory is free");
    publish_state(t);
    spdlog::warn("tenant {}: {} processes left suspended by an earlier scheduler ({}); they are resumed once "
                 "their memory is free",
                 entry.tenant, s.processes.size(), describe_bytes(s.total()));
  }
  journal_entries_.clear();
  write_journal();
}

}  // namespace cuslice
