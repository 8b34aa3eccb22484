// A plain copy of what the shared segment says, for the people and programs who ask: the
// daemon's metrics endpoint and `cuslice status` both read the segment through this, so
// the two never disagree on what a field means. Usage and counters are what the daemon
// published there from the tenant regions (which only the daemon and each tenant's own
// processes map).
//
// Taking a snapshot only loads atomics (relaxed, plus an acquire on each state word before
// the fields it publishes); it never writes, so it works on a read-only mapping and while
// hooks and the daemon keep changing the segment. Values are each exact, not mutually
// consistent: a counter read a microsecond after its neighbour may be a step ahead.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "protocol/shm_protocol.h"

namespace cuslice {

struct GpuSnapshot {
  uint32_t index = 0;                 // the GPU's index in the segment (its NVML index on the node)
  uint64_t memory_total = 0;          // bytes; 0: no hook has reported it yet
  std::optional<std::string> uuid;    // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" when known
  std::optional<uint32_t> holder;     // tenant index holding the token, if any
  bool spatial = false;               // its tenants may run side by side (minor 5)
  bool group_holds = false;           // its spatial group holds the token
  uint64_t handoffs = 0;
  uint32_t unhooked_processes = 0;  // GPU processes without the hook (usage watchdog)
  uint64_t unhooked_bytes = 0;      // what the driver says they hold
};

// One tenant on one GPU; `gpu` is an index into SegmentSnapshot::gpus.
struct TenantGpuSnapshot {
  size_t gpu = 0;
  uint64_t memory_used = 0;
  std::optional<uint64_t> memory_quota;  // bytes, when the tenant has a quota this GPU resolves
  uint64_t gpu_time_ns = 0;
  uint64_t wait_ns = 0;
  uint64_t oom_refusals = 0;
  uint64_t token_grants = 0;
  uint32_t achieved_share_ppm = 0;
  bool holds_token = false;
  uint64_t over_quota_bytes = 0;  // the driver's count beyond quota and allowance (watchdog)
  uint32_t watchdog_kills = 0;
  uint64_t bytes_moved = 0;  // by suspensions and resumptions, both ways (memory preemption), to the MiB
  // The tenant's share of this GPU; from a daemon older than minor 3, the tenant's one share.
  uint32_t share_ppm = 0;
  // The configuration lets the tenant use this GPU (always, from a daemon older than minor 3).
  bool allowed = true;
  // It runs in the GPU's spatial group (minor 5).
  bool spatial = false;

  // Whether `cuslice status` and the metrics show the tenant on this GPU: it may use it, or it
  // holds memory, time or the token there all the same.
  bool shown() const { return allowed || memory_used != 0 || gpu_time_ns != 0 || holds_token || over_quota_bytes != 0; }
};

struct TenantSnapshot {
  uint32_t index = 0;
  std::string name;
  bool retired = false;  // removed by a reload, kept while its processes run
  uint32_t priority = 1;  // 0 low, 1 normal, 2 high
  uint32_t share_ppm = 0;
  uint32_t limit_ppm = 1'000'000;
  std::optional<uint64_t> memory_quota_bytes;  // as configured, in bytes
  std::optional<uint32_t> memory_quota_ppm;    // as configured, as millionths of the card
  std::vector<pid_t> pids;                     // registered processes, ascending
  std::vector<TenantGpuSnapshot> gpus;         // one per SegmentSnapshot::gpus entry
  // Memory preemption (docs/design/preemption.md).
  bool preemptible = false;
  shm::Tenant::Preemption suspension = shm::Tenant::kRunning;
  uint64_t suspensions = 0;
  uint64_t suspended_ns = 0;
  uint64_t suspend_ns = 0;
  uint64_t resume_ns = 0;
  // The pinned host memory its processes are to prepare for the fast way (the tenant's
  // `host_pool` for each registered process that may move its memory), bytes.
  uint64_t host_pool_target = 0;
  // Its processes' share of the SMs where it runs side by side (100: the whole card).
  uint32_t sm_percent = 100;
};

// "running", "suspending", "suspended", "resuming", "failed".
const char* suspension_name(shm::Tenant::Preemption state);

struct SegmentSnapshot {
  uint16_t abi_major = 0;
  uint16_t abi_minor = 0;
  shm::DaemonState state = shm::DaemonState::kStarting;
  uint64_t generation = 0;
  uint64_t quantum_ns = 0;
  uint64_t share_window_ns = 0;  // 0 from a daemon older than minor 1
  uint32_t lower_timeslice_us = 0;  // 0: off, or a daemon older than minor 2
  pid_t daemon_pid = 0;
  bool ephemeral = false;
  // The MPS control daemon of the spatial GPUs: "off" (none is spatial, or a daemon older than
  // minor 5), "running", "starting", "failed"; times it was started.
  std::string mps = "off";
  uint32_t mps_starts = 0;
  std::vector<GpuSnapshot> gpus;        // only GPUs in use (see gpu_in_use), by index
  std::vector<TenantSnapshot> tenants;  // active and retired tenants, by index
};

// A GPU is shown once something happened on it (a hook reported its size, a tenant holds
// memory or time on it, its token moved), or a tenant allowed on some GPUs only may use it.
// The segment has room for kMaxGpus whether or not the node has them.
bool gpu_in_use(const shm::Segment& segment, uint32_t gpu);

SegmentSnapshot take_snapshot(const shm::Segment& segment);

// "GPU-" followed by the UUID in the form nvidia-smi prints.
std::string format_gpu_uuid(const std::array<uint64_t, 2>& words);

const char* priority_name(uint32_t priority);

}  // namespace cuslice
