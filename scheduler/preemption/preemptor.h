// Memory preemption in the daemon (docs/design/preemption.md), the one object the daemon and the
// clients call: it holds the classes below and wires them, and decides nothing itself. A
// hook whose allocation did not fit the card asks (a MemoryRequest); the policy
// (memory_preemption.h) picks preemptible tenants to suspend; their hooks move their memory
// (the fast way) or the suspender's thread runs the driver's checkpoint on their processes;
// the answer goes back in the asker's slot once the memory is free, or when nothing will be.
// Suspended tenants are resumed once their memory fits again, all their processes together.
// What is suspended is journalled, so that a daemon started again resumes what an earlier one
// left suspended.
//
// Calls go one way, down this list (scheduler/README.md draws them):
//   MemoryRequests        the requests for room and the decisions on them
//   SuspensionOperations  starting suspensions and resumptions; what follows their outcomes;
//                         it owns the next four
//   FastWay, SuspensionOutcomes, JournalKeeper, TenantSuspender
//                         the hooks' orders and answers; what operations came to; the
//                         journal; the driver's checkpoint on a thread of its own
//   MemoryFacts, MemoryPreemption, ClaimLog
//                         the tenants' memory as the policy takes it; the policy (pure); the
//                         log's word on what processes claim
// PreemptionReport reads them all for `cuslice status` and the metrics.
//
// Reads the tenant table, the registered processes and the tenant regions; writes the
// tenants' preemption words and counters and the answers in the segment. Never touches the
// sockets (the clients component hands requests over) nor the token (the daemon tells the
// scheduling step which tenants are suspended).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "protocol/socket_protocol.h"
#include "scheduler/preemption/claim_log.h"
#include "scheduler/preemption/memory_facts.h"
#include "scheduler/preemption/memory_preemption.h"
#include "scheduler/preemption/memory_requests.h"
#include "scheduler/preemption/preemption_report.h"
#include "scheduler/preemption/suspension_operations.h"
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

  Preemptor(PreemptionOptions options, SharedSegment& segment, TenantRegions& regions, const ProcessTable& processes,
            const TenantTable& tenants);

  // Start-up, in this order: read_journal(), then configure() once the tenant table is
  // applied, then adopt_journal().
  void read_journal() { operations_.read_journal(); }
  // Each card's memory as the daemon itself knows it (MemoryFacts::set_card_sizes).
  void set_card_sizes(const std::array<uint64_t, shm::kMaxGpus>& sizes) { facts_.set_card_sizes(sizes); }
  // After every application of the tenant table: the policy's parameters, the allocation wait
  // the hooks read, the fast way's policy of every process, and the driver's API loaded when
  // a preemptible tenant first appears.
  void configure();
  void adopt_journal() { operations_.adopt_journal(); }
  // The suspender's descriptor, readable when outcomes wait (on_suspender_outcomes()); -1
  // while preemption is off.
  int event_fd() const { return operations_.event_fd(); }

  // A registered process's request for room (clients hand it over as it arrives); decided at
  // the next step() with every other request of the same wake-up.
  void on_memory_request(const ProcessRecord& process, const wire::MemoryRequest& request) {
    requests_.on_request(process, request);
  }
  // The process in `slot` left: its requests go with it.
  void forget_memory_waits_of(uint32_t slot) { requests_.forget(slot); }
  // Takes the suspender's outcomes; a scheduling step should follow.
  void on_suspender_outcomes() { take(operations_.take_outcomes()); }
  // Takes the hooks' answers, decides the requests and outcomes that arrived since the last
  // step (once for all of them), resumes what may be, drops waits given up; returns when to
  // run again. Run at every step.
  Nanos step(Nanos now);
  // Bit t: tenant entry t is suspended.
  uint64_t suspended_mask() const { return operations_.suspended_mask(); }
  // At every statistics tick: the suspended tenants' time, the claims of preemptible tenants'
  // processes, and the processes that joined a suspended tenant.
  void publish_suspended_time(Nanos now);
  // One line per tenant with something to say, for `cuslice status` (PreemptionReport).
  std::vector<std::string> report() const { return report_.lines(); }
  // The fast way's figures by tenant name, for the metrics.
  TenantPreemptionFigures figures() const { return report_.figures(); }

 private:
  // What operations came to, handed to the requests; returns when to look again.
  Nanos take(const Progress& progress);
  // The hooks' answers, taken (SuspensionOperations::poll).
  Nanos poll(Nanos now) { return take(operations_.poll(now)); }

  SharedSegment& segment_;
  const TenantTable& tenants_;
  MemoryPreemption policy_;
  MemoryFacts facts_;
  ClaimLog claims_;
  SuspensionOperations operations_;
  MemoryRequests requests_;
  PreemptionReport report_;
};

}  // namespace cuslice
