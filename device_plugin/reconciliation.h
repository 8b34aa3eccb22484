// What a PodResources snapshot means for the allocations (ledger.h, step 3): each allocation
// is linked to the container holding its memory IDs (labels namespace/pod/container) and to
// the compute IDs that container holds (its share); one no container holds any more goes,
// after removal_delay (seen before) or unseen_grace (never seen); memory a container holds
// that no allocation covers is adopted, counted as used with no tenant. Conditions worth a log
// line are reported once while they last.
//
// Changes the allocation record only; never talks to the kubelet or the scheduler (the
// caller removes the tenants of what this returns as removed).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "device_plugin/allocation_book.h"
#include "device_plugin/gpu_table.h"

namespace cuslice::device_plugin {

// One container of a PodResources snapshot, with the IDs it holds of each resource.
struct Holding {
  Workload workload;
  std::vector<std::string> memory_ids;
  std::vector<std::string> compute_ids;
};

struct ReconcileResult {
  std::vector<Allocation> removed;    // their tenants go from the scheduler
  std::vector<std::string> warnings;  // new conditions worth one log line each
};

class Reconciler {
 public:
  // LedgerOptions::unseen_grace and removal_delay.
  Reconciler(Clock::duration unseen_grace, Clock::duration removal_delay)
      : unseen_grace_(unseen_grace), removal_delay_(removal_delay) {}

  // Applies a snapshot of every container holding IDs of either resource, asked for at
  // `now`. `may_remove` false: links and labels only.
  ReconcileResult reconcile(const GpuTable& gpus, AllocationBook& book, const std::vector<Holding>& holdings,
                            Clock::time_point now, bool may_remove);
  // Links only, with a snapshot asked for while the kubelet admits a container: what it
  // holds is not all it will (no warning about compute without memory, nothing adopted).
  void link_only(AllocationBook& book, const std::vector<Holding>& holdings, Clock::time_point now) const;

 private:
  // Names of the allocations no container holds any more, long enough to go.
  std::vector<std::string> link_or_age(AllocationBook& book, const std::vector<Holding>& holdings,
                                       Clock::time_point now, std::vector<bool>& covered) const;
  // Notes when a seen allocation was first missed; true once it has been missing (or, never
  // seen, has existed) long enough to go.
  bool absent_long_enough(Allocation& a, Clock::time_point now) const;
  void warn_compute_only(const Holding& hold, std::set<std::string>& still, ReconcileResult& result);

  Clock::duration unseen_grace_;
  Clock::duration removal_delay_;
  std::set<std::string> warned_;  // conditions already logged, by key
};

}  // namespace cuslice::device_plugin
