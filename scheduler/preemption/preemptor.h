// Memory preemption in the daemon (docs/preemption.md): a hook whose allocation did not fit the
// card asks (a MemoryRequest); the policy (memory_preemption.h) picks preemptible tenants to
// suspend; the suspender's thread (tenant_suspender.h) runs the driver's checkpoint API on
// their processes; the answer goes back in the asker's slot once the memory is free, or when
// nothing will be. Suspended tenants are resumed once their memory is free again, all their
// processes together. What is suspended is journalled (suspension_journal.h), so that a
// daemon started again resumes what an earlier one left suspended.
//
// Owns the pending memory requests, the suspensions, the policy's state, the checkpoint API
// and the suspender. Reads the tenant table, the registered processes and the tenant regions;
// writes the tenants' preemption words and counters and the answers in the segment. Never
// touches the sockets (the clients component hands requests over) nor the token (the daemon
// tells the scheduling step which tenants are suspended).
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "protocol/socket_protocol.h"
#include "scheduler/preemption/checkpoint_api.h"
#include "scheduler/preemption/memory_preemption.h"
#include "scheduler/preemption/suspension.h"
#include "scheduler/preemption/suspension_journal.h"
#include "scheduler/preemption/tenant_suspender.h"
#include "scheduler/segment/process_table.h"
#include "scheduler/segment/shared_segment.h"
#include "scheduler/segment/tenant_regions.h"
#include "scheduler/tenants/tenant_table.h"

namespace cuslice {

struct PreemptionOptions {
  std::string cuda_library = "libcuda.so.1";  // the driver with the checkpoint API
  std::string meminfo_path = "/proc/meminfo";  // where the host's available memory is read
  std::string journal_path;
};

class Preemptor {
 public:
  using Nanos = std::chrono::nanoseconds;
  static constexpr Nanos kNever = MemoryPreemption::kNever;
  // How often processes that joined a suspended tenant, unknown to the driver, are looked at.
  static constexpr Nanos kJoinCheckPeriod = std::chrono::seconds(1);

  Preemptor(PreemptionOptions options, SharedSegment& segment, TenantRegions& regions, const ProcessTable& processes,
            const TenantTable& tenants);

  // Start-up, in this order: read_journal(), then configure() once the tenant table is
  // applied, then adopt_journal().
  void read_journal();
  // Each card's memory as the daemon itself knows it (NVML; 0: unknown, then the
  // configuration's gpu_memory). What a tenant's hook reports is never used.
  void set_card_sizes(const std::array<uint64_t, shm::kMaxGpus>& sizes) { card_ = sizes; }
  // After every application of the tenant table: the policy's parameters, the allocation wait
  // the hooks read, and the driver's API loaded when a preemptible tenant first appears.
  void configure();
  void adopt_journal();
  // The suspender's descriptor, readable when outcomes wait (on_suspender_outcomes()); -1
  // while preemption is off.
  int event_fd() const { return suspender_ ? suspender_->event_fd() : -1; }

  // Bounds on pending requests for room: per process, per user, overall. A request past one
  // is refused at once.
  static constexpr std::ptrdiff_t kMaxWaitsPerProcess = 16;
  static constexpr std::ptrdiff_t kMaxWaitsPerUid = 64;
  static constexpr size_t kMaxWaits = 256;

  // A registered process's request for room (clients hand it over as it arrives); decided at
  // the next step() with every other request of the same wake-up.
  void on_memory_request(const ProcessRecord& process, const wire::MemoryRequest& request);
  // The process in `slot` left: its requests go with it.
  void forget_memory_waits_of(uint32_t slot);
  // Takes the suspender's outcomes; a scheduling step should follow.
  void on_suspender_outcomes();
  // Decides the requests and outcomes that arrived since the last step (once for all of
  // them), resumes what may be, drops waits given up; returns when to run again. Run at
  // every step.
  Nanos step(Nanos now);
  // Bit t: tenant entry t is suspended.
  uint64_t suspended_mask() const;
  // At every statistics tick: the suspended tenants' time, the claims of preemptible tenants'
  // processes, and the processes that joined a suspended tenant.
  void publish_suspended_time(Nanos now);
  // One line per tenant with something to say, for `cuslice status`: name, state, reason.
  std::vector<std::string> report() const;
  // The fast way's figures by tenant name, for the metrics.
  struct Figures {
    bool fast = false;        // the last suspension went the fast way
    uint64_t moved_out = 0;   // what it took off the card
    uint64_t host_pool = 0;   // pinned host memory its processes prepared
    double time_to_room = 0;  // seconds its last request that needed room waited for it
  };
  std::map<std::string, Figures> figures() const;

 private:
  struct MemoryWait {  // an allocation waiting for room (a MemoryRequest not yet answered)
    uint32_t slot = 0;
    int32_t pid = 0;
    uid_t uid = 0;
    uint32_t tenant = 0, gpu = 0, sequence = 0;
    uint64_t bytes = 0;
    uint64_t reported_free = 0;  // the card's free memory as the hook's driver said
    uint64_t freed = 0;          // by suspensions completed since
    bool waiting = false;        // told to wait for operations under way (logged once)
    Nanos asked{0}, deadline{0};
  };

  // preemptor.cpp: requests and decisions.
  bool preemptible(uint32_t t) const { return tenants_.preemptible(t); }
  std::vector<PreemptTenant> preempt_tenants() const;
  std::vector<GpuMemory> gpu_memory() const;
  uint64_t host_available() const;
  void publish_state(uint32_t t);
  // The same when the published state differs from the policy's (a few loads otherwise: run
  // at every scheduling step).
  void republish_state(uint32_t t);
  void answer(uint32_t slot, uint32_t sequence, shm::MemoryDecision decision);
  void decide_memory_waits();
  // `stop`: the tenant's processes to stop rather than checkpoint (Verdict::stop); `move`:
  // bytes of `gpu` its hooks move (the fast way), 0 for the checkpoint.
  void start_suspension(uint32_t t, Nanos now, const std::vector<int32_t>& stop, uint64_t move, uint32_t gpu);
  void resume(uint32_t t, Nanos now);
  // Logs, once per process, a preemptible tenant's process that says it uses what the
  // driver's checkpoint cannot move. Allocates nothing unless it finds a new one.
  void note_claims();
  bool suspended(uint32_t t) const { return preemption_.state(t) == SuspendState::kSuspended; }
  void write_journal() const;

  // fast_suspension.cpp: the fast way, carried out by the processes' hooks on orders.
  void start_fast_suspension(uint32_t t, Nanos now, uint32_t gpu, uint64_t bytes);
  // Writes an order for every registered process of t: kMoveOut spreads `bytes` of `gpu` over
  // them, the most movable first; kMoveBack asks all for everything.
  void send_orders(uint32_t t, shm::MoveOrder kind, uint32_t gpu, uint64_t bytes);
  void start_fast_resume(uint32_t t, Nanos now);
  // Orders tenant t's hooks (send_orders) and waits for their answers (poll_moves).
  void give_orders(uint32_t t, Suspension::Moves moves, uint32_t gpu, uint64_t bytes, Nanos now);
  // Takes the hooks' answers in; returns when to look again while some are missing.
  Nanos poll_moves(Nanos now);
  // The hooks could not do it: the checkpoint moves the rest (the hooks go on holding).
  void escalate(uint32_t t, Nanos now, const std::string& why);
  // Writes every registered process's fast-way policy (at start and every reload).
  void write_move_policies();

  // suspension_outcomes.cpp: what the suspender's jobs came to.
  void on_suspend_outcome(const SuspendOutcome& outcome, Nanos now);
  void on_resume_outcome(const SuspendOutcome& outcome, Nanos now);
  // Suspends the registered processes of suspended tenant t that are not suspended with it
  // (they joined it since, or had no CUDA state when it was suspended); returns when to look
  // again.
  Nanos suspend_joiners(uint32_t t, Nanos now);
  void on_joiners_outcome(const SuspendOutcome& outcome, Nanos now);
  // What tenant t's process in `slot` holds now, by GPU, by its own count.
  std::vector<uint64_t> charged(uint32_t t, uint32_t slot) const;

  PreemptionOptions options_;
  std::array<uint64_t, shm::kMaxGpus> card_{};
  SharedSegment& segment_;
  TenantRegions& regions_;
  const ProcessTable& processes_;
  const TenantTable& tenants_;
  SuspensionJournal journal_;
  // The API outlives the suspender that calls it.
  std::unique_ptr<CheckpointApi> checkpoint_api_;
  std::unique_ptr<TenantSuspender> suspender_;
  MemoryPreemption preemption_;
  std::vector<MemoryWait> memory_waits_;
  bool decide_due_ = false;  // requests or outcomes arrived since the waits were last decided
  std::array<Suspension, shm::kMaxTenants> suspensions_{};
  std::map<uint32_t, std::string> last_refusal_;  // by tenant: why its last request was refused
  // By tenant, for `cuslice status`: how its last suspension went ("fast", "checkpoint") and
  // what it took off the card; how long its last request that needed room waited for it.
  struct LastSuspension {
    const char* path = "";
    uint64_t moved_out = 0;
    Nanos time_to_room{0};
  };
  std::array<LastSuspension, shm::kMaxTenants> last_{};
  std::set<std::pair<int32_t, uint64_t>> claims_logged_;  // pid, start time: note_claims() said it
  std::vector<JournalEntry> journal_entries_;  // read at start, until adopt_journal()
};

}  // namespace cuslice
