// The DRA driver's look at the node, once every poll period: it reads the GPUs (NVML) and the
// scheduler's tenants, tells the preparer both (it makes lost tenants again,
// ClaimPreparer::reconcile), and hands the publisher the slice to keep on the API server: the
// present GPUs while the scheduler answers, none once it has not answered for the scheduler's
// grace (nothing placed here could be enforced). Says in the log what changed since the last
// look: GPUs gone or back, the scheduler silent, answering again or restarted.
//
// Serves nothing and writes nothing itself; one thread (the driver's main loop) calls it.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "dra_plugin/claim_preparer.h"
#include "dra_plugin/resource_slice.h"
#include "dra_plugin/slice_publisher.h"
#include "node/gpu_inventory.h"
#include "node/scheduler_client.h"

namespace cuslice::dra {

class ControlLoop {
 public:
  using Clock = std::chrono::steady_clock;

  ControlLoop(const node::GpuInventory& inventory, const node::SchedulerClient& scheduler, ClaimPreparer& preparer,
              SlicePublisher& publisher, SliceOptions slice, double scheduler_grace_seconds);

  // The GPUs before the kubelet can call: a claim is prepared on the GPUs NVML reports.
  void first_look();
  // A look at the GPUs and the scheduler, and the slice that follows. When the scheduler
  // answered (or did not), from which the next look is counted.
  Clock::time_point look();

 private:
  std::vector<node::GpuInfo> look_at_gpus();
  // Whether the slice may list GPUs: the scheduler answers, or has been silent for less than
  // its grace.
  bool enforceable(Clock::time_point& now);

  const node::GpuInventory& inventory_;
  const node::SchedulerClient& scheduler_;
  ClaimPreparer& preparer_;
  SlicePublisher& publisher_;
  const SliceOptions slice_;
  const double grace_seconds_;  // as given, for the log
  const std::chrono::milliseconds grace_;
  std::vector<node::GpuInfo> listed_;  // at the last look
  bool scheduler_silent_ = false;
  Clock::time_point silent_since_;
  uint64_t generation_ = 0;  // the scheduler's segment, at the last answer
  uint32_t spatial_gpus_ = 0;  // its spatial GPUs (bit g), at the last answer
};

}  // namespace cuslice::dra
