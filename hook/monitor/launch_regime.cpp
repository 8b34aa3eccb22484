// Setting the launch path's regime from the neighbours (launch_regime.h). May call
// monitor_state, scheduler_link (gpu), channel_groups, the client and log.
#include "hook/monitor/launch_regime.h"

#include "hook/base/log.h"
#include "hook/bookkeeping/channel_groups.h"
#include "hook/link/client.h"
#include "hook/link/scheduler_link.h"
#include "hook/monitor/monitor_state.h"

namespace cuslice::activity {
namespace {

// Stores the regime: launched without the token (`sliced`), or bounded as the neighbours say.
void set_regime(const client::Neighbours& n, bool sliced, bool was) {
  g_state.capped.store(n.capped, std::memory_order_relaxed);
  if (sliced && !was) {
    // In this order: a launch that still sees itself bounded finds parking off; the gates
    // already closed open at this pass (let_held_work_run), and the token is not kept.
    g_state.sliced.store(true, std::memory_order_seq_cst);
    g_state.higher.store(false, std::memory_order_relaxed);
    g_state.others.store(false, std::memory_order_relaxed);
    for (int d = 0; d < kMaxDevices; ++d)
      if (g_state.devices[d].busy.load(std::memory_order_acquire)) client::token_release(scheduler_link::gpu(d));
  } else {
    g_state.others.store(n.others && !sliced, std::memory_order_relaxed);
    g_state.higher.store(n.higher && !sliced, std::memory_order_relaxed);
    g_state.sliced.store(sliced, std::memory_order_seq_cst);
  }
}

// At debug level: the regime and the slice when they change.
void log_regime(uint32_t slice, bool sliced, bool was) {
  if (!log::enabled(log::Level::kDebug)) return;
  if (sliced != was) {
    if (sliced)
      CUSLICE_LOG(kDebug, "launches go on without the token: the GPU preempts them within the short slice "
                          "(%u channel groups at %u us)", channel_groups::counts().groups, slice);
    else
      CUSLICE_LOG(kDebug, "launches wait for the token again");
  }
  if (slice != g_state.slice_logged) {
    const channel_groups::Counts c = channel_groups::counts();
    CUSLICE_LOG(kDebug, "GPU time slice %s: %u of %u channel groups shortened, %u controls refused",
                slice != 0 ? "shortened below a higher-priority tenant" : "the driver's", c.shortened, c.groups,
                c.refused);
  }
}

}  // namespace

void look_at_neighbours() {
  const client::Neighbours n = client::neighbours();
  // Below a higher-priority tenant the GPU switches away from this process's kernels within
  // the short slice when the higher tenant's work arrives (channel_groups.h). Not beside
  // another process of the tenant: the two run at once under the same token, and short
  // slices on both sides are mostly switching (docs/evidence/benchmarks.md, "Time slices").
  const uint32_t slice = n.higher && !n.siblings ? n.lower_timeslice_us : 0;
  channel_groups::apply(slice);
  // The token still orders this tenant against tenants it does not yield to, and keeps a
  // cap; and a group the kernel did not confirm short would leave a kernel uncut.
  const bool sliced = slice != 0 && !n.peers && !n.capped && channel_groups::verify(slice);
  const bool was = g_state.sliced.load(std::memory_order_relaxed);
  set_regime(n, sliced, was);
  log_regime(slice, sliced, was);
  g_state.slice_logged = slice;
}

}  // namespace cuslice::activity
