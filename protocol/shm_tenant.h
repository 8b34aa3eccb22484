// One tenant's entry in the segment (protocol/shm_protocol.h): its parameters, its memory
// preemption state and counters, and its use of each GPU as the daemon publishes it. The
// daemon alone writes it; what the tenant's hooks write is its region
// (protocol/shm_tenant_region.h). Its layout is checked in shm_protocol.h.
#pragma once

#include <atomic>
#include <cstdint>

#include "protocol/shm_limits.h"

namespace cuslice::shm {

// A memory quota of none (Tenant::memory_quota).
inline constexpr uint64_t kUnlimited = UINT64_MAX;

// A tenant's use of one GPU, as the daemon publishes it. All written by the daemon only;
// read by the CLI and the metrics (relaxed: each value exact, not mutually consistent). The
// daemon zeroes them when it gives a free tenant entry to a new tenant; the counters are
// monotonic while the tenant exists.
struct alignas(64) TenantGpu {
  // Bytes reserved on this GPU by all processes of the tenant: a copy of
  // TenantGpuUse::memory_used (the counter the quota is enforced on), stored at every
  // scheduling step, at each statistics tick and before the daemon answers `cuslice status`
  // (kDescribe) or a metrics scrape.
  std::atomic<uint64_t> memory_used;
  // Nanoseconds of GPU time the tenant's hooks reported (TenantGpuUse::gpu_time_ns), as the
  // daemon charged it to the policy: increases only, each step's increase bounded.
  std::atomic<uint64_t> gpu_time_ns;
  // Nanoseconds threads of the tenant spent blocked waiting for this GPU's token
  // (TenantGpuUse::wait_ns), increases only, bounded like gpu_time_ns.
  std::atomic<uint64_t> wait_ns;
  // Allocations the tenant's hooks refused for its quota (TenantGpuUse::oom_refusals), and
  // times the daemon gave this GPU's token to the tenant.
  std::atomic<uint64_t> oom_refusals, token_grants;
  // Share of this GPU's time the tenant used over the last Segment::share_window_ns:
  // reported GPU time in the window / the window's length, in millionths, at most 1e6.
  // Stored (relaxed) a few times a second.
  std::atomic<uint32_t> achieved_share_ppm;
  // The tenant's share of this GPU under contention, in millionths, as Tenant::share_ppm is
  // for the whole node: the configured share, or the part a tenant without one gets of what
  // the explicit shares of this GPU's tenants leave. 0: the configuration does not let the
  // tenant use this GPU. Written by the daemon with the tenant's other parameters (minor 3;
  // zero, "every GPU, Tenant::share_ppm", from an older daemon).
  std::atomic<uint32_t> share_ppm;
  // What the driver says the tenant's processes hold on this GPU beyond its quota and the
  // watchdog's allowance (0: within), as the usage watchdog last found it; and how many of
  // its processes the watchdog killed for it (`on_violation: kill`), monotonic while the
  // tenant exists.
  std::atomic<uint64_t> over_quota_bytes;
  std::atomic<uint32_t> watchdog_kills;
  // MiB of this GPU's memory the tenant's suspensions moved to host memory and its
  // resumptions moved back, both ways added (memory preemption). Written by the daemon
  // (fetch_add); wraps after 4 PiB.
  std::atomic<uint32_t> moved_mib;
};

struct alignas(64) Tenant {
  enum State : uint32_t {
    kFree = 0,     // no tenant here
    kActive = 1,   // defined by the current configuration
    kRetired = 2,  // removed by a reload; kept until its last process exits
  };
  // Written by the daemon (release) after name and quotas; read by hooks and the CLI.
  std::atomic<uint32_t> state;
  // 0 low, 1 normal, 2 high. Read by hooks (is a neighbour of higher priority, does a
  // lower-priority tenant wait) and the CLI; the daemon decides from its own copy.
  std::atomic<uint32_t> priority;
  // Per-GPU quota, as bytes (kUnlimited: none) ...
  std::atomic<uint64_t> memory_quota;
  // ... or, when non-zero, as millionths of the card's memory: used when the configuration
  // says "25%" and the daemon does not know the card's size; each hook resolves it against
  // the device total it queried from the driver.
  std::atomic<uint32_t> memory_quota_ppm;
  // Memory preemption. Bits 0-7: the tenant's suspension state (kRunning ... kSuspendFailed
  // below); kPreemptible: the configuration lets it be suspended. Written by the daemon
  // (store, release) as the state changes, then FUTEX_WAKE; read by the CLI and the metrics,
  // and by the tenant's hooks, whose processes that joined the tenant while it is suspended
  // wait on it (FUTEX_WAIT, in bounded slices: a daemon that dies wakes nobody) before they
  // use the GPU.
  std::atomic<uint32_t> preemption;
  enum Preemption : uint32_t {
    kRunning = 0,
    kSuspending = 1,
    kSuspended = 2,
    kResuming = 3,
    kSuspendFailed = 4,  // a suspension or resumption failed: `cuslice status` says why
    kStateMask = 0xFF,
    kPreemptible = 1u << 8,
  };
  char name[kNameSize];  // written by the daemon while state is kFree
  // Written by the daemon (relaxed) with the other parameters, before `state`; information
  // for the CLI and the metrics (the daemon keeps its own copy).
  // Share of the GPU guaranteed under contention, in millionths: the configured share, or
  // the part of what explicit shares leave that a tenant without one gets.
  std::atomic<uint32_t> share_ppm;
  // Cap on the tenant's GPU time in millionths; 1'000'000 means uncapped.
  std::atomic<uint32_t> limit_ppm;
  // Memory preemption's counters, written by the daemon (relaxed), monotonic while the tenant
  // exists (zeroed with the others for a new tenant): suspensions that completed;
  // nanoseconds suspended (completed suspensions, and the current one as of the daemon's last
  // update, a few times a second); nanoseconds the daemon spent suspending and resuming (from
  // the first driver call to the last, all processes together).
  std::atomic<uint64_t> suspensions, suspended_ns, suspend_ns, resume_ns;
  TenantGpu gpu[kMaxGpus];
};

}  // namespace cuslice::shm
