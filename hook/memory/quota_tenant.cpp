// The tenant's reconciliation (quota.h): what every process of the tenant keeps free of its
// quota for its processes' unmeasured memory and warm-ups, computed again from the driver's
// figures, and the warm-up a new context begins. Slow paths only, under the slow-path mutex.
// Owns the buffers of the readings; of a ledger (quota_ledger.h) writes only when it last
// reconciled. May call process_usage, scheduler_link, settings, log and the client.
#include <unistd.h>

#include <atomic>
#include <mutex>

#include "hook/base/log.h"
#include "hook/base/settings.h"
#include "hook/bookkeeping/process_usage.h"
#include "hook/link/client.h"
#include "hook/link/scheduler_link.h"
#include "hook/memory/quota.h"
#include "hook/memory/quota_ledger.h"
#include "protocol/clock.h"
#include "protocol/saturating.h"
#include "protocol/shm_protocol.h"

namespace cuslice::quota {
namespace {

// The tenant's reconciliation: what every process of the tenant must leave free of its quota
// besides the headroom (client.h, shm::TenantGpuUse::kept_free), computed again from the
// driver's figures: for each of the tenant's processes, what NVML says it holds beyond what
// it charged (memory its own hook has not measured yet), or its warm-up allowance while it is
// young if that is more. Buffers for the slow path, under g_slow.
constexpr unsigned kMaxListed = 256;
client::TenantProcess g_tenant_processes[shm::kMaxProcesses];
process_usage::Usage g_listed[kMaxListed];

uint64_t tenant_keep_locked(int device, int gpu) {
  unsigned listed = 0;
  if (!process_usage::device_processes(device, g_listed, kMaxListed, &listed)) listed = 0;
  const size_t n = client::tenant_processes(gpu, now_ns(), g_tenant_processes, shm::kMaxProcesses);
  const uint64_t allowance = settings().context_headroom;
  const uint32_t self = static_cast<uint32_t>(getpid());
  uint64_t keep = 0;
  for (size_t i = 0; i < n; ++i) {
    const client::TenantProcess& p = g_tenant_processes[i];
    // This process by its own pid: the daemon's namespace may differ from NVML's.
    const uint32_t pid = p.self ? self : static_cast<uint32_t>(p.pid);
    uint64_t held = 0;
    for (unsigned j = 0; j < listed; ++j)
      if (g_listed[j].pid == pid) {
        held = g_listed[j].bytes;
        break;
      }
    uint64_t beyond = held > p.charged ? held - p.charged : 0;
    if (p.young && beyond < allowance) beyond = allowance;
    keep = saturating_add(keep, beyond);
  }
  return keep;
}

}  // namespace

namespace internal {

// Computes the tenant's kept_free again and stores it, unless another process changed it
// meanwhile (then again, a few times; after that the other's value stands). `give_up`: this
// process needs the room itself, so its own warm-up allowance ends first.
void reconcile(int device, bool give_up) {
  if (!scheduler_link::enabled()) return;
  const int gpu = scheduler_link::gpu(device);
  std::lock_guard<std::mutex> lock(g_slow);
  if (give_up) client::memory_end_warmup(gpu);
  for (int attempt = 0; attempt < 4; ++attempt) {
    const uint64_t before = client::tenant_memory_kept(gpu);
    const uint64_t keep = tenant_keep_locked(device, gpu);
    if (client::tenant_memory_replace_kept(gpu, before, keep)) {
      if (keep != before)
        CUSLICE_LOG(kDebug, "device %d: the tenant keeps %llu bytes free (was %llu)", device,
                    static_cast<unsigned long long>(keep), static_cast<unsigned long long>(before));
      return;
    }
  }
}

void reconcile_if_due(int device, Ledger& l) {
  const int64_t now = coarse_now_ns();
  int64_t last = l.last_reconcile_ns.load(std::memory_order_relaxed);
  if (now - last < kMeasureIntervalNs ||
      !l.last_reconcile_ns.compare_exchange_strong(last, now, std::memory_order_relaxed))
    return;
  reconcile(device, /*give_up=*/false);
}

}  // namespace internal

using namespace internal;

void begin_warmup(int device) {
  const uint64_t warmup = settings().context_warmup_ns;
  if (counted(device) == nullptr || !scheduler_link::enabled() || warmup == 0) return;
  const int64_t now = now_ns();
  const uint64_t left = static_cast<uint64_t>(INT64_MAX - now);
  const int64_t until = now + static_cast<int64_t>(warmup < left ? warmup : left);
  client::memory_begin_warmup(scheduler_link::gpu(device), now, until, settings().context_headroom);
}

}  // namespace cuslice::quota
