// The per-device ledgers' state, shared by quota's files (quota.h is the API): the ledgers,
// the slow-path mutex, and which ledger a device has. For quota.cpp (the ledger and its
// charges), quota_measurement.cpp (corrections from measurement) and quota_tenant.cpp (the
// tenant's reconciliation) only; nothing else in hook/ includes it.
//
// Owns data only; may call settings and scheduler_link. The same rules as quota.h hold: no
// allocation, no locks and no logging on the charge path.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "hook/base/settings.h"
#include "hook/link/scheduler_link.h"
#include "hook/memory/quota.h"

namespace cuslice::quota::internal {

// One device's ledger. `used` is what the process holds by the hook's account; under a
// scheduler every change to it is mirrored to the tenant's counter in the shared segment
// (grow / shrink / try_reserve in quota.cpp are the only writers).
struct alignas(64) Ledger {
  std::atomic<uint64_t> used{0};
  std::atomic<uint64_t> limit{kUnlimited};       // CUSLICE_MEMORY_LIMIT, resolved
  std::atomic<unsigned> checkpoint_shift{64};    // log2 of the checkpoint step; 64: none
  std::atomic<uint64_t> context_charge{0};
  std::atomic<uint64_t> small_bytes{0};          // live allocations under kGranule, summed
  std::atomic<int64_t> last_measure_ns{0};
  std::atomic<uint64_t> measured_checkpoint{0};  // highest checkpoint a reading was taken at
  std::atomic<uint64_t> unexplained{0};          // measured memory no hooked call accounts for
  std::atomic<uint64_t> ops_started{0};          // Operations begun / ended: equal when none runs
  std::atomic<uint64_t> ops_finished{0};
  std::atomic<int64_t> last_reconcile_ns{0};     // the tenant's, at a sixteenth of its quota
};

// The least time between two readings of the process's usage at checkpoints, and between two
// reconciliations of the tenant, per device (quota.cpp says why readings are rate-limited).
inline constexpr int64_t kMeasureIntervalNs = 50'000'000;

extern Ledger g_ledger[kMaxDevices];
extern std::mutex g_slow;  // slow paths only: limit resolution, refresh, reconciliation

inline Ledger* ledger(int device) {
  return device >= 0 && device < kMaxDevices ? &g_ledger[device] : nullptr;
}

// The ledger of a device whose memory is counted (a local limit, or a scheduler), else null.
inline Ledger* counted(int device) {
  Ledger* l = ledger(device);
  return l != nullptr && (settings().has_limit[device] || scheduler_link::enabled()) ? l : nullptr;
}

// quota_measurement.cpp: releases pool reserve no allocation uses, through the function
// registered with set_pool_reserves() (none registered: false).
bool trim_pool_reserves(int device);
// quota_measurement.cpp: reads the process's usage if the charge that carried `used` into
// `checkpoint` is the first to get there, or if the last reading is old enough.
void measure_if_due(int device, Ledger& l, uint64_t checkpoint);

// quota_tenant.cpp: the tenant's reconciliation (`give_up`: this process's own warm-up
// allowance ends first), and the same at most once a measuring interval.
void reconcile(int device, bool give_up);
void reconcile_if_due(int device, Ledger& l);

}  // namespace cuslice::quota::internal
