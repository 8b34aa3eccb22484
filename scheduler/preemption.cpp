// Memory preemption in the daemon (docs/preemption.md): a hook whose allocation did not fit the
// card asks (a MemoryRequest); the policy (memory_preemption.h) picks preemptible tenants to
// suspend; the suspender's thread (tenant_suspender.h) runs the driver's checkpoint API on
// their processes; the answer goes back in the asker's slot once the memory is free, or when
// nothing will be. Suspended tenants are resumed once their memory is free again, all their
// processes together. What is suspended is written to a journal beside the socket, so that a
// daemon started again resumes what an earlier one left suspended.
//
// Calls the policy, the suspender, the segment and the journal file; never the sockets but to
// read a request (clients.cpp hands it over) and never the token (scheduling.cpp asks here
// which tenants are suspended).
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "clock.h"
#include "daemon.h"
#include "saturating.h"
#include "futex.h"
#include "host_memory.h"
#include "os_fds.h"
#include "process_info.h"

namespace cuslice {

using Nanos = TokenPolicy::Nanos;

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

std::string Daemon::journal_path() const { return options_.socket_path + ".suspended.json"; }

void Daemon::configure_preemption() {
  PreemptionParams params;
  params.resume_holdoff = config_.scheduler.preemption.resume_holdoff;
  params.host_reserve = config_.scheduler.preemption.host_reserve;
  params.resume_margin = config_.scheduler.preemption.resume_margin;
  params.stop_unsuspendable = config_.scheduler.preemption.stop_unsuspendable;
  preemption_.reconfigure(params);
  const bool wanted = std::any_of(config_.tenants.begin(), config_.tenants.end(),
                                  [](const TenantConfig& t) { return t.preemptible; });
  // The driver is loaded when a preemptible tenant first appears, not before: a node without
  // preemption never opens libcuda in the daemon.
  if ((wanted || journal_pending_) && !checkpoint_api_) {
    checkpoint_api_ = CheckpointApi::load(options_.cuda_library);
    if (checkpoint_api_->available()) {
      suspender_ = std::make_unique<TenantSuspender>(*checkpoint_api_, kLockTimeoutMs);
      add_to_epoll(suspender_->event_fd(), EPOLLIN);
      spdlog::info("memory preemption: the driver's checkpoint API is available");
    } else {
      spdlog::warn("memory preemption is off: {}", checkpoint_api_->why());
    }
  }
  const bool on = wanted && suspender_ != nullptr;
  segment_->allocation_wait_ns.store(on ? static_cast<uint64_t>(config_.scheduler.preemption.allocation_wait.count()) : 0,
                                     std::memory_order_relaxed);
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) publish_preemption_state(t);
}

bool Daemon::preemptible(uint32_t t) const {
  const int c = config_.find_tenant(segment_->tenants[t].name);
  return c >= 0 && config_.tenants[static_cast<size_t>(c)].preemptible;
}

std::vector<PreemptTenant> Daemon::preempt_tenants() const {
  std::vector<PreemptTenant> out(shm::kMaxTenants);
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    if (!tenant_params_[t].present && segment_->tenants[t].state.load() != shm::Tenant::kRetired) continue;
    PreemptTenant& pt = out[t];
    pt.present = true;
    pt.name = segment_->tenants[t].name;
    pt.priority = tenant_params_[t].priority;
    const int c = config_.find_tenant(pt.name);
    pt.preemptible = c >= 0 && config_.tenants[static_cast<size_t>(c)].preemptible;
    // A quota that is not preemptible is a guarantee, the file's or one the device plugin sold.
    const shm::Tenant& st = segment_->tenants[t];
    pt.guaranteed = !pt.preemptible && (st.memory_quota.load(std::memory_order_relaxed) != shm::kUnlimited ||
                                        st.memory_quota_ppm.load(std::memory_order_relaxed) != 0);
  }
  std::set<int32_t> registered;
  for (const auto& [fd, client] : clients_) {
    const uint32_t t = client.tenant;  // the daemon's own record
    const shm::TenantRegion* region = regions_.get(t);
    if (client.slot < 0 || t >= shm::kMaxTenants || !out[t].present || region == nullptr) continue;
    // What the process says of itself, in its tenant's region: a claim about its own tenant
    // only, which never spares the tenant unless `unsuspendable: keep` (memory_preemption.h).
    const shm::ProcessUse& use = region->processes[client.slot];
    PreemptProcess p;
    p.pid = client.pid;
    p.start_time = segment_->processes[client.slot].start_time.load(std::memory_order_relaxed);
    p.gpu_bytes.resize(shm::kMaxGpus);
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) p.gpu_bytes[g] = use.charged[g].load(std::memory_order_relaxed);
    const uint32_t flags = use.checkpoint_flags.load(std::memory_order_relaxed);
    p.ipc = (flags & shm::ProcessSlot::kUsesIpc) != 0;
    p.managed = (flags & shm::ProcessSlot::kUsesManaged) != 0;
    p.mps = (flags & shm::ProcessSlot::kUsesMps) != 0;
    out[t].processes.push_back(std::move(p));
    registered.insert(client.pid);
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

std::vector<GpuMemory> Daemon::gpu_memory() const {
  std::vector<GpuMemory> gpus(shm::kMaxGpus);
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    uint64_t total = segment_->gpus[g].memory_total.load(std::memory_order_relaxed);
    if (total == 0 && config_.scheduler.gpu_memory) total = *config_.scheduler.gpu_memory;
    uint64_t used = 0;
    for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
      const shm::TenantRegion* region = regions_.get(t);
      if (segment_->tenants[t].state.load() == shm::Tenant::kFree || region == nullptr) continue;
      if (preemption_.state(t) == SuspendState::kSuspended) continue;  // holds nothing on the card
      // The tenant's live counter, which its processes can set to anything: saturated, so a
      // huge value makes the card look full rather than wrap around to look empty.
      const uint64_t tenant_used = region->gpu[g].memory_used.load(std::memory_order_relaxed);
      used = saturating_add(used, tenant_used);
    }
    gpus[g] = {total, total > used ? total - used : 0};
  }
  return gpus;
}

uint64_t Daemon::host_available() const {
  const std::optional<uint64_t> available = read_mem_available(options_.meminfo_path);
  if (!available) spdlog::warn("cannot read MemAvailable from {}: nothing can be suspended", options_.meminfo_path);
  return available.value_or(0);
}

void Daemon::publish_preemption_state(uint32_t t) {
  uint32_t word = shm_state(preemption_.state(t));
  if (segment_->tenants[t].state.load() != shm::Tenant::kFree && preemptible(t)) word |= shm::Tenant::kPreemptible;
  std::atomic<uint32_t>& published = segment_->tenants[t].preemption;
  if (published.load(std::memory_order_relaxed) == word) return;
  published.store(word, std::memory_order_release);
  // Processes that joined the tenant while it was suspended wait on the word.
  futex_wake_all(&published);
}

void Daemon::republish_preemption_state(uint32_t t) {
  const uint32_t published = segment_->tenants[t].preemption.load(std::memory_order_relaxed) & shm::Tenant::kStateMask;
  if (published != shm_state(preemption_.state(t))) publish_preemption_state(t);
}

void Daemon::answer_memory(uint32_t slot, uint32_t sequence, shm::MemoryDecision decision) {
  std::atomic<uint32_t>& word = segment_->processes[slot].memory_decision;
  word.store((sequence << 8) | static_cast<uint32_t>(decision), std::memory_order_release);
  futex_wake_all(&word);
}

void Daemon::on_memory_request(const Client& client, const wire::MemoryRequest& request) {
  if (client.slot < 0 || request.sequence == 0) return;
  const uint32_t slot = static_cast<uint32_t>(client.slot);
  const uint32_t sequence = request.sequence & 0xFFFFFF;
  const uint64_t wait = segment_->allocation_wait_ns.load(std::memory_order_relaxed);
  if (request.gpu >= shm::kMaxGpus || wait == 0) {
    answer_memory(slot, sequence, shm::MemoryDecision::kRefused);
    return;
  }
  MemoryWait w;
  w.slot = slot;
  w.pid = client.pid;
  w.tenant = client.tenant;
  w.gpu = request.gpu;
  w.sequence = sequence;
  w.bytes = request.bytes;
  w.reported_free = request.free_bytes;
  w.asked = Nanos{now_ns()};
  w.deadline = w.asked + Nanos(wait);
  // A process cannot pile requests up in the daemon: past a few pending, it is refused.
  constexpr std::ptrdiff_t kMaxWaitsPerProcess = 16;
  const auto pending = std::count_if(memory_waits_.begin(), memory_waits_.end(),
                                     [&](const MemoryWait& m) { return m.slot == slot; });
  if (pending >= kMaxWaitsPerProcess) {
    answer_memory(slot, sequence, shm::MemoryDecision::kRefused);
    return;
  }
  memory_waits_.push_back(w);
  decide_memory_waits();
}

void Daemon::decide_memory_waits() {
  if (memory_waits_.empty()) return;
  const Nanos now = Nanos{now_ns()};
  preemption_.update(preempt_tenants());
  std::vector<MemoryWait> still;
  for (MemoryWait& w : memory_waits_) {
    if (now >= w.deadline) continue;  // the hook gave up already
    std::vector<GpuMemory> gpus = gpu_memory();
    // On the GPU asked for: what the driver said was free, plus what suspensions freed since.
    // The daemon's own account cannot see memory held outside the hooks; the driver's can.
    gpus[w.gpu].free = w.reported_free + w.freed;
    const Verdict v = preemption_.request({w.tenant, w.gpu, w.bytes}, gpus, host_available(), now);
    switch (v.kind) {
      case Verdict::Kind::kFits:
        if (w.freed > 0) {
          spdlog::info("{}: room made in {:.2f} s", v.reason, secs(now - w.asked));
        }
        answer_memory(w.slot, w.sequence, shm::MemoryDecision::kRetry);
        continue;
      case Verdict::Kind::kRefused:
        spdlog::info("pid {}: {}", w.pid, v.reason);
        last_refusal_[w.tenant] = v.reason;
        answer_memory(w.slot, w.sequence, shm::MemoryDecision::kRefused);
        continue;
      case Verdict::Kind::kSuspend:
        spdlog::info("{}", v.reason);
        for (uint32_t t : v.suspend) start_suspension(t, now, v.stop);
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

void Daemon::start_suspension(uint32_t t, Nanos now, const std::vector<int32_t>& stop) {
  Suspension& s = suspensions_[t];
  s = Suspension{};
  s.operation_started = now;
  s.bytes.assign(shm::kMaxGpus, 0);
  const shm::TenantRegion* region = regions_.get(t);
  for (const auto& [fd, client] : clients_) {
    if (client.slot < 0 || client.tenant != t || region == nullptr) continue;
    Suspension::Process p;
    p.pid = client.pid;
    p.stop = std::find(stop.begin(), stop.end(), client.pid) != stop.end();
    p.start_time = segment_->processes[client.slot].start_time.load(std::memory_order_relaxed);
    p.bytes.resize(shm::kMaxGpus);
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
      // As the process says (its tenant's region): what the tenant is said to give back.
      p.bytes[g] = region->processes[client.slot].charged[g].load(std::memory_order_relaxed);
      s.bytes[g] += p.bytes[g];
    }
    s.processes.push_back(std::move(p));
  }
  s.busy = true;
  publish_preemption_state(t);
  // Journalled before the first driver call: a scheduler that dies now leaves processes that
  // may be locked or checkpointed, and the next one must find them.
  write_journal();
  SuspendJob job;
  job.kind = SuspendJob::Kind::kSuspend;
  job.tenant = t;
  job.processes = s.job_processes();
  job.stop = s.stop_processes();
  job.stop_refused = config_.scheduler.preemption.stop_unsuspendable;
  suspender_->submit(std::move(job));
}

std::vector<SuspendProcess> Daemon::Suspension::job_processes() const {
  std::vector<SuspendProcess> out;
  for (const Process& p : processes)
    if (!p.stop) out.push_back({p.pid, p.start_time});
  return out;
}

std::vector<SuspendProcess> Daemon::Suspension::stop_processes() const {
  std::vector<SuspendProcess> out;
  for (const Process& p : processes)
    if (p.stop) out.push_back({p.pid, p.start_time});
  return out;
}

void Daemon::Suspension::drop(const std::function<bool(const Process&)>& which) {
  std::erase_if(processes, which);
  bytes.assign(shm::kMaxGpus, 0);
  for (const Process& p : processes)
    for (uint32_t g = 0; g < shm::kMaxGpus && g < p.bytes.size(); ++g) bytes[g] += p.bytes[g];
}

uint64_t Daemon::Suspension::total() const {
  uint64_t sum = 0;
  for (uint64_t b : bytes) sum += b;
  return sum;
}

void Daemon::on_suspender_outcomes() {
  if (!suspender_) return;
  const Nanos now = Nanos{now_ns()};
  for (const SuspendOutcome& o : suspender_->take()) {
    const uint32_t t = o.tenant;
    Suspension& s = suspensions_[t];
    shm::Tenant& tenant = segment_->tenants[t];
    const std::string name = tenant.name;
    s.busy = false;
    for (int32_t pid : o.gone) spdlog::info("tenant {}: pid {} exited while being suspended or resumed", name, pid);
    for (const SuspendOutcome::Stopped& stopped : o.stopped) {
      spdlog::warn("tenant {}: pid {} stopped (SIGKILL) instead of suspended: {} (preemption.unsuspendable: stop)",
                   name, stopped.pid,
                   stopped.why.empty() ? "it says it uses what the driver's checkpoint cannot move" : stopped.why);
    }
    if (o.join) {
      on_joiners_outcome(o, now);
    } else if (o.job == SuspendJob::Kind::kSuspend) {
      if (o.kind == SuspendOutcome::Kind::kDone) {
        // What the processes hold now: one may have allocated more before the lock took it.
        const shm::TenantRegion* region = regions_.get(t);
        for (const auto& [fd, client] : clients_) {
          if (client.slot < 0 || client.tenant != t || region == nullptr) continue;
          const shm::ProcessUse& use = region->processes[client.slot];
          for (Suspension::Process& p : s.processes) {
            if (p.pid != client.pid) continue;
            for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
              const uint64_t now_held = use.charged[g].load(std::memory_order_relaxed);
              s.bytes[g] += now_held - p.bytes[g];
              p.bytes[g] = now_held;
            }
          }
        }
        // Those the driver knew nothing of hold nothing on a GPU: not suspended (they are
        // checked again as processes that joined the suspended tenant). What the others held is
        // free now, for the allocations waiting on it, the stopped processes' memory too; what
        // stays suspended is the rest.
        s.drop([&](const Suspension::Process& p) { return std::count(o.unknown.begin(), o.unknown.end(), p.pid) > 0; });
        for (uint32_t g = 0; g < shm::kMaxGpus; ++g)
          for (MemoryWait& w : memory_waits_)
            if (w.gpu == g) w.freed += s.bytes[g];
        s.drop([&](const Suspension::Process& p) {
          return p.stop || std::any_of(o.stopped.begin(), o.stopped.end(),
                                       [&](const SuspendOutcome::Stopped& x) { return x.pid == p.pid; });
        });
        // Until their connections close, the stopped look like processes that joined.
        for (const SuspendOutcome::Stopped& x : o.stopped) s.join_skipped.insert(x.pid);
        preemption_.suspended(t, now);
        s.suspended_since = now;
        s.suspended_ns_before = tenant.suspended_ns.load(std::memory_order_relaxed);
        tenant.suspensions.fetch_add(1, std::memory_order_relaxed);
        tenant.suspend_ns.fetch_add(static_cast<uint64_t>(o.took.count()), std::memory_order_relaxed);
        for (uint32_t g = 0; g < shm::kMaxGpus; ++g)
          tenant.gpu[g].moved_mib.fetch_add(static_cast<uint32_t>(s.bytes[g] >> 20), std::memory_order_relaxed);
        spdlog::info("tenant {} suspended: {} moved to host memory in {:.2f} s", name,
                     describe_bytes(s.total()), secs(o.took));
      } else if (o.kind == SuspendOutcome::Kind::kRefused) {
        preemption_.suspend_refused(t, o.reason);
        s = Suspension{};
        spdlog::warn("tenant {} not suspended, it runs on: {}", name, o.reason);
      } else {
        preemption_.failed(t, o.reason);
        spdlog::error("tenant {}: suspension failed: {} (processes stuck: {})", name, o.reason,
                      fmt::join(o.stuck, ", "));
      }
    } else {
      if (o.kind == SuspendOutcome::Kind::kDone) {
        preemption_.resumed(t, now);
        tenant.suspended_ns.store(s.suspended_ns_before + static_cast<uint64_t>((now - s.suspended_since).count()),
                                  std::memory_order_relaxed);
        tenant.resume_ns.fetch_add(static_cast<uint64_t>(o.took.count()), std::memory_order_relaxed);
        for (uint32_t g = 0; g < shm::kMaxGpus; ++g)
          tenant.gpu[g].moved_mib.fetch_add(static_cast<uint32_t>(s.bytes[g] >> 20), std::memory_order_relaxed);
        spdlog::info("tenant {} resumed after {:.1f} s: {} moved back in {:.2f} s", name,
                     secs(now - s.suspended_since), describe_bytes(s.total()), secs(o.took));
        s = Suspension{};
      } else if (o.kind == SuspendOutcome::Kind::kDeferred) {
        preemption_.resume_deferred(t, o.reason);
        spdlog::warn("tenant {} stays suspended for now: {}", name, o.reason);
      } else {
        preemption_.failed(t, o.reason);
        spdlog::error("tenant {}: resumption failed: {} (processes stuck: {})", name, o.reason,
                      fmt::join(o.stuck, ", "));
      }
    }
    publish_preemption_state(t);
  }
  write_journal();
  decide_memory_waits();
  schedule();
}

void Daemon::note_claims() {
  for (const auto& [fd, client] : clients_) {
    if (client.slot < 0 || client.tenant >= shm::kMaxTenants) continue;
    const shm::TenantRegion* region = regions_.get(client.tenant);
    if (region == nullptr) continue;
    const uint32_t flags = region->processes[client.slot].checkpoint_flags.load(std::memory_order_relaxed);
    if (flags == 0 || !preemptible(client.tenant)) continue;
    const uint64_t start = segment_->processes[client.slot].start_time.load(std::memory_order_relaxed);
    if (claims_logged_.count({client.pid, start})) continue;
    // Forget the processes that left before remembering one more.
    std::erase_if(claims_logged_, [&](const std::pair<int32_t, uint64_t>& seen) {
      return std::none_of(clients_.begin(), clients_.end(), [&](const auto& c) { return c.second.pid == seen.first; });
    });
    claims_logged_.emplace(client.pid, start);
    PreemptProcess p;
    p.ipc = (flags & shm::kUsesIpc) != 0;
    p.managed = (flags & shm::kUsesManaged) != 0;
    p.mps = (flags & shm::kUsesMps) != 0;
    const char* what = describe_claim(p);
    spdlog::warn("tenant {} is preemptible, and its pid {} says it uses {}, which the driver's checkpoint cannot "
                 "move: {}",
                 segment_->tenants[client.tenant].name, client.pid, what ? what : "something",
                 config_.scheduler.preemption.stop_unsuspendable
                     ? "it is stopped (SIGKILL), not suspended, when the tenant's memory is needed "
                       "(preemption.unsuspendable: stop)"
                     : "the tenant is not suspended while it runs (preemption.unsuspendable: keep)");
  }
}

Nanos Daemon::preemption_step(Nanos now) {
  if (!suspender_) return TokenPolicy::kNever;
  note_claims();
  bool any = !memory_waits_.empty();
  for (uint32_t t = 0; t < shm::kMaxTenants && !any; ++t) any = preemption_.state(t) != SuspendState::kRunning;
  if (!any) {
    // What the last update left (a suspended tenant whose processes all left is running
    // again) is what hooks waiting on the word must see.
    for (uint32_t t = 0; t < shm::kMaxTenants; ++t) republish_preemption_state(t);
    return TokenPolicy::kNever;
  }
  preemption_.update(preempt_tenants());
  Nanos wake = TokenPolicy::kNever;
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    // A suspended tenant whose processes all exited is forgotten by the policy: nothing is
    // left to resume.
    Suspension& s = suspensions_[t];
    if (preemption_.state(t) == SuspendState::kRunning && !s.processes.empty() && !s.busy) {
      spdlog::info("tenant {}: every suspended process exited", segment_->tenants[t].name);
      s = Suspension{};
      write_journal();
    }
    republish_preemption_state(t);
    if (preemption_.state(t) == SuspendState::kSuspended) wake = std::min(wake, suspend_joiners(t, now));
  }
  std::vector<uint64_t> pending(shm::kMaxGpus, 0);
  for (const MemoryWait& w : memory_waits_) {
    if (w.deadline > now) pending[w.gpu] += w.bytes;
    wake = std::min(wake, w.deadline);
  }
  const MemoryPreemption::Resumption r = preemption_.step(gpu_memory(), pending, now);
  for (uint32_t t : r.resume) {
    Suspension& s = suspensions_[t];
    s.operation_started = now;
    spdlog::info("resuming tenant {}: {} back to the card", segment_->tenants[t].name, describe_bytes(s.total()));
    s.busy = true;
    publish_preemption_state(t);
    SuspendJob job;
    job.kind = SuspendJob::Kind::kResume;
    job.tenant = t;
    job.processes = s.job_processes();
    suspender_->submit(std::move(job));
  }
  // Drop the waits whose hooks gave up.
  std::erase_if(memory_waits_, [&](const MemoryWait& w) { return w.deadline <= now; });
  return std::min(wake, r.wake_at);
}

bool Daemon::suspended(uint32_t t) const { return preemption_.state(t) == SuspendState::kSuspended; }

void Daemon::publish_suspended_time(Nanos now) {
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

Nanos Daemon::suspend_joiners(uint32_t t, Nanos now) {
  Suspension& s = suspensions_[t];
  if (s.busy) return TokenPolicy::kNever;
  const shm::TenantRegion* region = regions_.get(t);
  SuspendJob job;
  for (const auto& [fd, client] : clients_) {
    if (client.slot < 0 || client.tenant != t || region == nullptr) continue;
    const bool suspended = std::any_of(s.processes.begin(), s.processes.end(),
                                       [&](const Suspension::Process& p) { return p.pid == client.pid; });
    if (suspended || s.join_skipped.count(client.pid)) continue;
    const uint64_t start = segment_->processes[client.slot].start_time.load(std::memory_order_relaxed);
    const bool claims = region->processes[client.slot].checkpoint_flags.load(std::memory_order_relaxed) != 0;
    if (claims && !config_.scheduler.preemption.stop_unsuspendable) continue;  // `keep`: left to run, reported
    (claims ? job.stop : job.processes).push_back({client.pid, start});
  }
  if (job.processes.empty() && job.stop.empty()) return TokenPolicy::kNever;
  // Those the driver knew nothing of at the last look wait in their hooks: looked at again a
  // little later, not at every step.
  if (now < s.next_join_check) return s.next_join_check;
  job.kind = SuspendJob::Kind::kSuspend;
  job.tenant = t;
  job.join = true;
  job.stop_refused = config_.scheduler.preemption.stop_unsuspendable;
  s.joining = job.processes;
  s.busy = true;
  preemption_.hold(t, true);  // a resumption now would leave them out
  suspender_->submit(std::move(job));
  return TokenPolicy::kNever;
}

void Daemon::on_joiners_outcome(const SuspendOutcome& o, Nanos now) {
  const uint32_t t = o.tenant;
  Suspension& s = suspensions_[t];
  shm::Tenant& tenant = segment_->tenants[t];
  const std::string name = tenant.name;
  preemption_.hold(t, false);
  const std::vector<SuspendProcess> joining = std::move(s.joining);
  s.joining.clear();
  auto listed = [](const std::vector<int32_t>& pids, int32_t pid) {
    return std::find(pids.begin(), pids.end(), pid) != pids.end();
  };
  auto stopped = [&](int32_t pid) {
    return std::any_of(o.stopped.begin(), o.stopped.end(), [&](const SuspendOutcome::Stopped& x) { return x.pid == pid; });
  };
  if (!o.unknown.empty()) s.next_join_check = now + kJoinCheckPeriod;
  for (int32_t pid : o.unknown) {
    if (s.join_noted.insert(pid).second)
      spdlog::info("tenant {}: pid {} joined it while it is suspended; it waits for the tenant's resumption", name, pid);
  }
  if (o.kind == SuspendOutcome::Kind::kRefused) {
    for (const SuspendProcess& p : joining) {
      if (listed(o.gone, p.pid) || listed(o.unknown, p.pid) || stopped(p.pid)) continue;
      s.join_skipped.insert(p.pid);
    }
    spdlog::warn("tenant {}: processes that joined it while it is suspended run on, unsuspended: {}", name, o.reason);
    return;
  }
  // Done, or failed: those suspended (or stuck, which the resumption reports) are the tenant's
  // suspended processes from now on.
  const shm::TenantRegion* region = regions_.get(t);
  for (const SuspendOutcome::Stopped& x : o.stopped) s.join_skipped.insert(x.pid);
  for (const SuspendProcess& p : joining) {
    if (listed(o.gone, p.pid) || listed(o.unknown, p.pid) || stopped(p.pid)) continue;
    if (o.kind == SuspendOutcome::Kind::kFailed && !listed(o.stuck, p.pid)) {
      s.join_skipped.insert(p.pid);  // rolled back: it runs
      continue;
    }
    Suspension::Process sp;
    sp.pid = p.pid;
    sp.start_time = p.start_time;
    sp.bytes.assign(shm::kMaxGpus, 0);
    for (const auto& [fd, client] : clients_) {
      if (client.pid != p.pid || client.slot < 0 || client.tenant != t || region == nullptr) continue;
      for (uint32_t g = 0; g < shm::kMaxGpus; ++g)
        sp.bytes[g] = region->processes[client.slot].charged[g].load(std::memory_order_relaxed);
    }
    uint64_t moved = 0;
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
      s.bytes[g] += sp.bytes[g];
      moved += sp.bytes[g];
      tenant.gpu[g].moved_mib.fetch_add(static_cast<uint32_t>(sp.bytes[g] >> 20), std::memory_order_relaxed);
    }
    spdlog::info("tenant {}: pid {} joined it while it is suspended, and is suspended too ({} by its hook's count, "
                 "in {:.2f} s)",
                 name, p.pid, describe_bytes(moved), secs(o.took));
    s.processes.push_back(std::move(sp));
  }
  if (o.kind == SuspendOutcome::Kind::kFailed) {
    spdlog::error("tenant {}: suspending processes that joined it failed: {} (processes stuck: {})", name, o.reason,
                  fmt::join(o.stuck, ", "));
  }
}

void Daemon::forget_memory_waits_of(uint32_t slot) {
  std::erase_if(memory_waits_, [&](const MemoryWait& w) { return w.slot == slot; });
}

std::vector<std::string> Daemon::preemption_report() const {
  std::vector<std::string> lines;
  const std::vector<PreemptTenant> tenants = preempt_tenants();
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    if (segment_->tenants[t].state.load() == shm::Tenant::kFree) continue;
    const SuspendState state = preemption_.state(t);
    std::string reason = preemption_.reason(t);
    // What a preemptible tenant's processes say of themselves is reported while they run.
    std::string claims = tenants[t].preemptible ? describe_claims(tenants[t]) : "";
    if (!claims.empty()) {
      claims += config_.scheduler.preemption.stop_unsuspendable
                    ? ": stopped rather than suspended when its memory is needed (unsuspendable: stop)"
                    : ": the tenant is never suspended while it runs (unsuspendable: keep)";
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

// --- The journal ------------------------------------------------------------------------------

void Daemon::write_journal() {
  nlohmann::json entries = nlohmann::json::array();
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    const SuspendState state = preemption_.state(t);
    if (state == SuspendState::kRunning || suspensions_[t].processes.empty()) continue;
    nlohmann::json processes = nlohmann::json::array();
    for (const Suspension::Process& p : suspensions_[t].processes)
      processes.push_back({{"pid", p.pid}, {"start_time", p.start_time}, {"bytes", p.bytes}});
    entries.push_back({{"tenant", std::string(segment_->tenants[t].name)},
                       {"state", to_string(state)},
                       {"reason", preemption_.reason(t)},
                       {"processes", processes}});
  }
  const std::string path = journal_path();
  if (entries.empty()) {
    std::remove(path.c_str());
    return;
  }
  const std::string temporary = path + ".new";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << entries.dump(2) << "\n";
    if (!out) {
      spdlog::error("cannot write {}: a restarted scheduler would not know what is suspended", temporary);
      return;
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) spdlog::error("cannot write {}: {}", path, error.message());
}

void Daemon::read_journal() {
  const std::string path = journal_path();
  std::ifstream in(path);
  if (!in) return;
  nlohmann::json entries;
  try {
    entries = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    spdlog::error("{}: unreadable ({}); tenants it names as suspended stay suspended: resume them with "
                  "`cuda-checkpoint --toggle --pid PID`",
                  path, e.what());
    return;
  }
  journal_pending_ = entries.is_array() && !entries.empty();
  journal_entries_ = entries;
}

void Daemon::adopt_journal() {
  if (!journal_pending_) return;
  journal_pending_ = false;
  const Nanos now = Nanos{now_ns()};
  preemption_.update(preempt_tenants());
  for (const nlohmann::json& entry : journal_entries_) {
    if (!entry.is_object() || !entry.contains("tenant") || !entry.contains("processes")) continue;
    const std::string name = entry.value("tenant", "");
    uint32_t t = shm::kMaxTenants;
    for (uint32_t i = 0; i < shm::kMaxTenants; ++i)
      if (segment_->tenants[i].state.load() != shm::Tenant::kFree && name == segment_->tenants[i].name) t = i;
    std::vector<Suspension::Process> found;
    for (const nlohmann::json& p : entry["processes"]) {
      Suspension::Process sp;
      sp.pid = p.value("pid", 0);
      sp.start_time = p.value("start_time", uint64_t{0});
      sp.bytes = p.value("bytes", std::vector<uint64_t>{});
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
                      p.pid, name, p.pid);
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
    publish_preemption_state(t);
    spdlog::warn("tenant {}: {} processes left suspended by an earlier scheduler ({}); they are resumed once "
                 "their memory is free",
                 name, s.processes.size(), describe_bytes(s.total()));
  }
  journal_entries_ = nlohmann::json();
  write_journal();
}

}  // namespace cuslice
