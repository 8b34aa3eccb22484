// Memory preemption, the policy: which preemptible tenants to suspend so that an allocation of a
// higher-priority tenant fits the card, and when to resume them. No I/O and no clock of its own:
// the daemon passes the tenants, the GPUs' memory, the host's available memory and the time,
// runs the driver's checkpoint operations itself and reports their outcome back. Tests drive it
// directly (tests/scheduler/preemption/test_memory_preemption.cpp).
//
// A suspended tenant's processes keep running on the CPU; their GPU memory is in host memory
// (cuCheckpointProcessCheckpoint) and their driver calls wait until they are resumed. All
// processes of a tenant are suspended and resumed together.
//
// Rules (docs/design/preemption.md):
//   1. Who may be suspended for a request: running preemptible tenants of strictly lower
//      priority than the requester that hold memory on the GPU asked for. When the requester is
//      non-preemptible and has a quota, its quota is a guarantee: every preemptible tenant may
//      be suspended for it, whatever its priority.
//   2. Order: lowest priority first, then the most recently started tenant (the latest start of
//      its earliest process), then the lowest index. Tenants are taken in that order until
//      their memory covers what is missing plus `room_margin` (or all are taken, if they cover
//      what is missing but not the margin); then any chosen tenant that is not needed after
//      all is spared again, the last chosen first.
//   3. Never suspended, with the reason kept for the log and `cuslice status`: a tenant whose
//      earlier suspension was refused by the driver (while the processes concerned live) or
//      whose suspension or resumption failed, and any tenant when the host's available memory
//      cannot take what would move plus `host_reserve`. A process that says it uses what the
//      driver cannot checkpoint (CUDA IPC memory, managed memory, an MPS client) says so in
//      memory its own tenant writes: with `stop_unsuspendable` (the default) the claim spares
//      nobody and changes no order; the tenant is chosen as any other and the verdict names
//      the claiming processes, which the daemon stops (no checkpoint is tried on them) before
//      it suspends the others. Without it, such a tenant is never suspended (rule 3 above).
//   4. Memory being freed already (tenants being suspended) counts: a request it covers waits
//      for it rather than suspending more.
//   5. Resume: a suspended tenant resumes once its memory, plus `resume_margin`, fits on every
//      GPU it held memory on, after what allocations still waiting for a decision need, and
//      has fitted for `resume_holdoff` without a break. Higher priority first, then the one
//      suspended longest; each resume's memory counts against the next.
//   6. Two ways to suspend (docs/design/preemption.md). The fast way, where the tenant's processes'
//      hooks can move their memory (every process says so, and together they can move the
//      tenant's part of what is missing on the GPU, or at least its part without the margin):
//      only that part moves, plus a little slack, and only its return decides the resumption. Otherwise the driver's checkpoint
//      moves everything. A tenant suspended the fast way still holds the rest on the card:
//      when a later request needs it, the tenant may be chosen again (after the running ones
//      of its rank): once more the fast way, then the checkpoint moves the rest. That is also
//      what keeps a tenant's word honest: hooks that say they moved more than they did leave
//      the next requests short, and the checkpoint follows.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cuslice {

struct PreemptionParams {
  std::chrono::nanoseconds resume_holdoff{std::chrono::seconds(1)};
  // Host memory left available after a suspension has moved its memory there.
  uint64_t host_reserve = uint64_t{4} << 30;
  // Card memory left free after a resume: a restore that runs out of memory leaves the
  // process stuck on current drivers, so the policy keeps a margin for what it cannot see
  // (memory not yet reported by the hooks, other processes on the card).
  uint64_t resume_margin = uint64_t{512} << 20;
  // Card memory made beyond what a request lacks, when a tenant is suspended for it: what the
  // requester does next (its first kernels load modules, its libraries take workspaces) must
  // find memory too, or it fails later with an error no framework recovers from. Made where
  // the tenants that may give way have it; a request they can cover without it goes ahead.
  uint64_t room_margin = uint64_t{1} << 30;
  // `scheduler.preemption.unsuspendable: stop`: what a process says of itself never spares
  // its tenant (rule 3).
  bool stop_unsuspendable = true;
  // `scheduler.preemption.fast`: suspend the fast way where the tenant can (rule 6).
  bool fast = true;
};

// One process of a tenant, as the daemon sees it.
struct PreemptProcess {
  int32_t pid = 0;
  uint64_t start_time = 0;           // clock ticks after boot (/proc/<pid>/stat field 22)
  std::vector<uint64_t> gpu_bytes;   // device memory it holds, by GPU index
  // What the process says it uses that the driver's checkpoint does not support (its own
  // tenant's region: a claim, not a fact; rule 3).
  bool ipc = false;      // CUDA IPC memory, exported or imported
  bool managed = false;  // managed (unified) memory
  bool mps = false;      // a client of an MPS server
  // The fast way (rule 6), as the process's hook reports it (its tenant's word): whether it
  // can move its memory, how much it can move (all GPUs), its pinned host memory for it.
  bool movable = false;
  uint64_t movable_bytes = 0;
  uint64_t pool_bytes = 0;
};

struct PreemptTenant {
  bool present = false;  // a tenant exists at this index
  std::string name;
  int priority = 1;          // higher wins: 0 low, 1 normal, 2 high
  bool preemptible = false;
  bool guaranteed = false;   // non-preemptible with a quota: the quota is a guarantee
  std::vector<PreemptProcess> processes;
};

struct GpuMemory {
  uint64_t total = 0;
  // Free now: tenants being suspended or resumed count as holding their memory, suspended
  // ones as holding none.
  uint64_t free = 0;
};

enum class SuspendState : uint8_t {
  kRunning,
  kSuspending,  // the daemon is checkpointing its processes
  kSuspended,
  kResuming,    // the daemon is restoring its processes
  kFailed,      // a suspension or resumption failed and could not be undone: see reason()
};

const char* to_string(SuspendState state);

struct AllocationRequest {
  uint32_t tenant = 0;
  uint32_t gpu = 0;
  uint64_t bytes = 0;
};

struct Verdict {
  enum class Kind : uint8_t {
    kFits,     // the card has the memory now
    kSuspend,  // `suspend` were chosen (now kSuspending): ask again once they are suspended
    kWait,     // suspensions or resumptions in flight will decide it: ask again after them
    kRefused,  // it cannot be made to fit: the allocation fails
  };
  Kind kind = Kind::kRefused;
  std::vector<uint32_t> suspend;
  // For each of `suspend`: the bytes its hooks move off the GPU asked for (the fast way), or 0:
  // the driver's checkpoint moves all it holds (for a tenant suspended the fast way already,
  // the rest).
  std::vector<uint64_t> move;
  // Processes of the tenants in `suspend` to stop rather than checkpoint: they say they use
  // what the checkpoint cannot move (rule 3, stop_unsuspendable).
  std::vector<int32_t> stop;
  uint64_t coming_free = 0;  // bytes on the GPU that suspensions in flight (these included) free
  uint64_t moving = 0;       // host bytes these new suspensions move (stopped processes' not)
  std::string reason;        // one line for the log and status
};

class MemoryPreemption {
 public:
  using Nanos = std::chrono::nanoseconds;
  static constexpr Nanos kNever = Nanos::max();

  explicit MemoryPreemption(const PreemptionParams& params = {}) : params_(params) {}
  void reconfigure(const PreemptionParams& params) { params_ = params; }

  // The tenants as they are now, by index. A tenant left without processes (or gone) is
  // forgotten: nothing of it remains to suspend or resume.
  void update(std::vector<PreemptTenant> tenants);

  // An allocation of request.bytes on request.gpu did not fit the card's free memory.
  Verdict request(const AllocationRequest& request, const std::vector<GpuMemory>& gpus,
                  uint64_t host_available, Nanos now);

  // What the daemon's checkpoint operations did.
  void suspended(uint32_t tenant, Nanos now);
  // A suspension the fast way moved `bytes` off its GPU (before suspended()).
  void moved(uint32_t tenant, uint64_t bytes);
  // A suspension the fast way failed (a process's hook said so, or did not answer in time):
  // the checkpoint moves the rest now, as if chosen again.
  void escalate(uint32_t tenant);
  // A suspension did not happen and was undone (the tenant runs): it is not tried again
  // while the tenant keeps a process that was there, with this reason.
  void suspend_refused(uint32_t tenant, std::string reason);
  void resumed(uint32_t tenant, Nanos now);
  // A resumption failed and may be tried again later (the tenant stays suspended).
  void resume_deferred(uint32_t tenant, std::string reason);
  // The tenant's GPU state is lost or stuck: it stays kFailed until its processes are gone.
  void failed(uint32_t tenant, std::string reason);
  // The tenant was found suspended (by an earlier daemon): it is resumed like any other.
  void adopt_suspended(uint32_t tenant, Nanos now, std::string reason);
  // While held, a suspended tenant is not resumed: the daemon is suspending processes that
  // joined it after it was suspended, and a resumption must include them.
  void hold(uint32_t tenant, bool held);

  // How often a suspended tenant that does not fit back is looked at again, at the least.
  static constexpr Nanos kRecheck{200'000'000};
  struct Resumption {
    std::vector<uint32_t> resume;  // now kResuming
    Nanos wake_at = kNever;        // call step() again no later than this
  };
  // pending: bytes, by GPU, of allocations still waiting for a decision.
  Resumption step(const std::vector<GpuMemory>& gpus, const std::vector<uint64_t>& pending, Nanos now);

  SuspendState state(uint32_t tenant) const;
  // Why the tenant is in its state (or was last refused), empty when there is nothing to say.
  const std::string& reason(uint32_t tenant) const;
  // Device memory the tenant holds (or, suspended, held), by GPU.
  std::vector<uint64_t> bytes(uint32_t tenant) const;
  // Of the `held` bytes the tenant holds on `gpu` by its counter, those not on the card: all
  // while suspended by the checkpoint, what moved while suspended the fast way, none else.
  uint64_t off_card(uint32_t tenant, uint32_t gpu, uint64_t held) const;
  // Whether the tenant is (being) suspended the fast way and its memory there is not checkpointed.
  bool fast(uint32_t tenant) const;
  // What the tenant's processes say they use that the checkpoint cannot move, as one line
  // ("process 12 says it holds managed memory, ..."), empty when none says anything.
  std::string claims(uint32_t tenant) const;
  Nanos suspended_at(uint32_t tenant) const;

 private:
  struct Book {
    SuspendState state = SuspendState::kRunning;
    std::string reason;
    std::vector<int32_t> refused_pids;  // the processes present when a suspension was refused
    Nanos suspended_at{0};
    std::optional<Nanos> fits_since;
    bool held = false;  // hold(): not resumed for now
    // Rule 6: suspended the fast way, `away` bytes off `fast_gpu`; `escalating` while the
    // checkpoint moves the rest; `no_escalation` once a checkpoint of the rest was refused.
    bool fast = false;
    uint32_t fast_gpu = 0;
    uint64_t away = 0;
    bool escalating = false;
    bool no_escalation = false;
    uint32_t topups = 0;  // moves the fast way after the first, on a later request
  };

  bool valid(uint32_t tenant) const { return tenant < tenants_.size() && tenants_[tenant].present; }
  uint64_t bytes_on(uint32_t tenant, uint32_t gpu) const;
  // What a suspension in flight (or done) takes off `gpu`, and what the tenant still has there.
  uint64_t freeing_on(uint32_t tenant, uint32_t gpu) const;
  uint64_t left_on(uint32_t tenant, uint32_t gpu) const;
  // What the tenant could give way on `gpu` now: all it holds while it runs, the rest while
  // suspended the fast way.
  uint64_t available_on(uint32_t tenant, uint32_t gpu) const {
    return books_[tenant].state == SuspendState::kSuspended ? left_on(tenant, gpu) : bytes_on(tenant, gpu);
  }
  // What the tenant's hooks can move off `gpu`, 0 unless every process of it can move.
  uint64_t movable_on(uint32_t tenant, uint32_t gpu) const;
  uint64_t pool_of(uint32_t tenant) const;
  // Host bytes a suspension of the tenant moves: `move` bytes the fast way, else the rest.
  uint64_t host_bytes(uint32_t tenant, uint64_t move) const;
  uint64_t total_bytes(uint32_t tenant) const;
  uint64_t start_of(uint32_t tenant) const;
  // Why the tenant cannot be suspended at all, or nothing.
  std::optional<std::string> unsuspendable(uint32_t tenant) const;
  // Bytes on `gpu` (all GPUs: kAllGpus) of the processes to stop rather than checkpoint.
  static constexpr uint32_t kAllGpus = UINT32_MAX;
  uint64_t stopped_bytes(uint32_t tenant, uint32_t gpu) const;

  // request()'s steps. "<tenant>'s allocation of <size> on GPU <g>", for the reasons.
  std::string describe_request(const AllocationRequest& request) const;
  // What the suspensions in flight free on `gpu`, and what they move to host memory.
  struct InFlight {
    uint64_t coming = 0;
    uint64_t moving = 0;
  };
  // What suspensions in flight free on `gpu` for `asker` (those it may be freed for), and
  // what all of them move to host memory.
  InFlight in_flight(uint32_t gpu, uint32_t asker) const;
  // Rule 1: tenant t may be suspended for `asker` (whatever its state).
  bool gives_way_to(uint32_t t, uint32_t asker) const;
  // The request does not fit even once the suspensions in flight are done: `missing` bytes
  // more are wanted. Chooses who gives way (rules 1, 2, 3, 6) and checks the host (rule 3).
  Verdict make_room(const AllocationRequest& request, const std::string& what, uint64_t missing,
                    const InFlight& flight, uint64_t host_available);
  // Whether tenant t may give way to `request` (rule 1); kNo with why in `skipped` when it
  // never does (rule 3); kResuming when it would, but is being resumed.
  enum class Candidacy : uint8_t { kNo, kYes, kResuming };
  Candidacy candidacy(uint32_t t, const AllocationRequest& request, std::vector<std::string>& skipped) const;
  // Rule 2: whether tenant a gives way before tenant b.
  bool gives_way_first(uint32_t a, uint32_t b) const;
  // Who may give way to `request` on its GPU (rule 1), in the order they do (rule 2); those
  // that never do are named in `skipped` with why (rule 3), and `resuming` says whether one
  // would but is being resumed.
  std::vector<uint32_t> candidates(const AllocationRequest& request, std::vector<std::string>& skipped,
                                   bool& resuming) const;
  // The fewest of `candidates`, from the first, that free `missing` bytes on `gpu`; `freed`
  // is what they hold there.
  // What a request lacks on its GPU: `need` without which it cannot fit, `want` with the room
  // margin.
  struct Shortfall {
    uint64_t need = 0;
    uint64_t want = 0;
  };
  std::vector<uint32_t> choose(const std::vector<uint32_t>& candidates, uint32_t gpu, Shortfall missing,
                               uint64_t& freed) const;
  // For each of `chosen`, the bytes its hooks move off `gpu` the fast way (rule 6), or 0.
  std::vector<uint64_t> fast_moves(const std::vector<uint32_t>& chosen, uint32_t gpu, Shortfall missing) const;
  // What tenant t moves the fast way to give `part` bytes of `gpu`, or 0: the checkpoint.
  uint64_t fast_part(uint32_t t, uint32_t gpu, Shortfall part) const;
  // Marks `chosen` as being suspended for `what`; returns their names with what they free,
  // and fills the processes to stop in `verdict`.
  std::string commit(const std::vector<uint32_t>& chosen, const std::vector<uint64_t>& move, uint32_t gpu,
                     const std::string& what, Verdict& verdict);

  // step()'s: the suspended tenants that may resume, in the order they do (rule 5), and
  // whether one's memory, with the margin, fits the `room` of every GPU.
  std::vector<uint32_t> resumption_order() const;
  bool fits_back(uint32_t tenant, const std::vector<uint64_t>& room) const;

  PreemptionParams params_;
  std::vector<PreemptTenant> tenants_;
  std::vector<Book> books_;
};

// "3.2 GiB", "512 MiB": sizes in reasons.
std::string describe_bytes(uint64_t bytes);

// What a process says it uses that the driver's checkpoint does not support ("managed
// memory"), or nullptr.
const char* describe_claim(const PreemptProcess& process);
// The tenant's claims as one line, as MemoryPreemption::claims() gives them.
std::string describe_claims(const PreemptTenant& tenant);

}  // namespace cuslice
