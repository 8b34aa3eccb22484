// THE shared-memory segment between cuslice-scheduler and every hooked process on a node.
//
// This header is the only definition of the layout: the daemon, the client library linked
// into the hook and the CLI all include it. Change it only together with kAbiMajor (any
// incompatible change: a field moved, resized or re-purposed) or kAbiMinor (a field added in
// space that was reserved and zero before, so older readers stay correct).
//
// Who does what
//   - The daemon creates the segment (shm_open, default name "/cuslice", mode 0666), fills
//     it, then publishes it by storing DaemonState::kRunning. It is the only writer of the
//     token holder, of tenant definitions and of process-slot identity.
//   - A hook maps it read-write after registering over the Unix socket (socket_protocol.h);
//     the reply names the segment and the process slot. A hook writes only: its tenant's
//     memory counter (CAS), its tenant's GPU-time counter (add), its own slot's charged bytes
//     and per-GPU flags, and the per-GPU waiting bits.
//   - Nothing in here is a lock. A process killed at any instruction leaves every word
//     meaningful; the daemon, which learns of the death from the socket, repairs what the
//     dead process owned (its slot, its charged memory, the token of its tenant).
//
// The segment is a cooperation protocol between processes that run the hook, not a security
// boundary: any process that can map it can lie about its usage. Confine it with the
// segment's file mode if tenants do not trust each other.
//
// All atomics are lock-free and address-free (static_asserts below), which is what makes
// them valid across processes. Futex waits on 32-bit words use the shared (not
// FUTEX_PRIVATE_FLAG) operations; see futex.h.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace cuslice::shm {

inline constexpr uint64_t kMagic = 0x315345'43494C53ull;  // "SLICES1" read as a number
inline constexpr uint16_t kAbiMajor = 1;
// Minor 1 added, in space that was padding and zero before: GpuState::memory_total/uuid,
// TenantGpu::wait_ns/oom_refusals/token_grants/achieved_share_ppm, Tenant::share_ppm/
// limit_ppm, and the header's share_window_ns/daemon_pid/flags. A reader of minor >= 1
// finds them filled by a daemon of minor >= 1; the hook-written ones are added to by any
// hook that knows them, whatever the daemon's minor (the words were zero and unused).
// Minor 2 added, likewise in zeroed padding: GpuState::preempt_priority and TenantGpu::flags,
// with which a hook of a higher-priority tenant takes the token itself (see `holder`).
// Minor 3 added, likewise in zeroed padding, the usage watchdog's findings, written by the
// daemon alone: GpuState::unhooked_processes/unhooked_bytes and TenantGpu::over_quota_bytes/
// watchdog_kills.
// Minor 4 added, likewise in zeroed padding, memory preemption (docs/preemption.md):
// Segment::allocation_wait_ns, Tenant::preemption and its counters, TenantGpu::moved_mib,
// ProcessSlot::checkpoint_flags and memory_decision.
inline constexpr uint16_t kAbiMinor = 4;

inline constexpr uint32_t kMaxTenants = 64;
inline constexpr uint32_t kMaxProcesses = 1024;
inline constexpr uint32_t kMaxGpus = 16;
inline constexpr uint32_t kNameSize = 64;  // NUL-terminated

inline constexpr uint32_t kNoTenant = UINT32_MAX;
inline constexpr uint64_t kUnlimited = UINT64_MAX;
inline constexpr const char* kDefaultName = "/cuslice";

enum class DaemonState : uint32_t {
  kStarting = 0,  // being filled; hooks must not use it
  kRunning = 1,   // published
  kStopped = 2,   // the daemon exited cleanly; hooks detach and run ungated
};

// One GPU's token. Sits alone in a cache line: every launch of every process reads it.
struct alignas(64) GpuState {
  // Tenant index allowed to launch on this GPU, or kNoTenant (nobody: the previous holder's
  // queued work is draining, or nobody wants the GPU).
  // Written by: the daemon, compare-exchange(release) from the value it last read, always
  // followed by a grant_seq increment; and (minor 2) by a hook whose tenant's priority is at
  // least `preempt_priority` and which is not capped: compare-exchange(acq_rel) from the
  // holder it saw to its own tenant, then a grant_seq increment and a kick, so that a
  // high-priority tenant takes the GPU at the next kernel boundary without a round trip
  // through the daemon. The daemon adopts such a change at its next step.
  // Read by: hooks on every launch, load(acquire). A holder whose tenant is no longer stored
  // here waits before its next launch; work it queued before stays queued (the daemon drains
  // it before granting the next tenant; a preempting hook does not wait for it: the hook of
  // a lower-priority tenant keeps that work short, CUSLICE_PREEMPT_QUEUED).
  std::atomic<uint32_t> holder;

  // Futex word: incremented (fetch_add, release) by the daemon after every store to
  // `holder`, then FUTEX_WAKE for all. A hook that waits loads grant_seq (acquire) BEFORE it
  // loads `holder`, and sleeps with FUTEX_WAIT(grant_seq, the value it loaded): if the daemon
  // changed the holder after the hook's check, the increment makes the kernel refuse the
  // sleep (EAGAIN), so no wake-up is ever lost. Wraps around freely.
  std::atomic<uint32_t> grant_seq;

  // Bit t: some process of tenant t is (or recently was) blocked waiting for this GPU.
  // Set by: hooks, fetch_or, before they sleep. Cleared by: the daemon, which recomputes it
  // from the process slots at every scheduling step. Read by: the holder's hooks when they
  // go idle, to decide whether the daemon must be told now (a "kick") or can learn it later.
  std::atomic<uint64_t> waiting_tenants;

  // Number of times the token changed hands; statistics for the CLI, written by the daemon.
  std::atomic<uint64_t> handoffs;

  // Since minor 1. The card's total memory in bytes, 0 while unknown. Written by hooks
  // (store, relaxed) when they learn it from the driver (cuDeviceTotalMem); every hook
  // writes the same value. Read by the CLI and the metrics, to show a quota given as a
  // share of the card in bytes.
  std::atomic<uint64_t> memory_total;
  // Since minor 1. The card's UUID: CUuuid's bytes 0-7 and 8-15, each memcpy'd into one
  // word (so the words hold them in the machine's byte order); both words 0 while unknown. Written by hooks (store, relaxed, both words) when they learn it
  // (cuDeviceGetUuid); read by the metrics for the `gpu` label. A reader may see one word
  // updated and not the other only while the first hook writes it.
  std::atomic<uint64_t> uuid[2];
  // Since minor 2. The lowest tenant priority (Tenant::priority) that may take the token
  // from the current holder without asking: the holder's priority + 1 (or the priority + 1
  // of the tenant whose queued work is draining); kNoPreempt while the GPU is free or a
  // daemon of minor < 2 runs (the word is then 0 only before any step: see kNoPreempt).
  // Written by the daemon (store, release) before it publishes a holder, and by a hook
  // that took the token (its own priority + 1). Read by hooks in token_acquire's slow path.
  std::atomic<uint32_t> preempt_priority;
  // Since minor 3. GPU processes that no registered process accounts for (no hook: a static
  // binary, LD_PRELOAD removed) and the memory the driver says they hold, as the daemon's
  // usage watchdog last found them (NVML, about once a second). Written by the daemon
  // (store, relaxed); read by the CLI and the metrics.
  std::atomic<uint32_t> unhooked_processes;
  std::atomic<uint64_t> unhooked_bytes;
};
// preempt_priority's "nobody may take it without asking". A daemon of minor < 2 leaves the
// word 0: hooks of minor >= 2 check the header's abi_minor before they use it.
inline constexpr uint32_t kNoPreempt = UINT32_MAX;

// A tenant's use of one GPU.
struct alignas(64) TenantGpu {
  // Bytes reserved on this GPU by all processes of the tenant: the tenant-wide quota counter.
  // Hooks reserve with one compare-exchange loop (fails rather than exceeding the quota) and
  // release with a subtraction that never goes below zero. The daemon subtracts a dead
  // process's charged bytes, adds the bytes a re-registering process declares, and resets
  // it to 0 when the tenant has no process left (which also reclaims bytes leaked by a
  // process killed between its two bookkeeping steps).
  std::atomic<uint64_t> memory_used;

  // Nanoseconds of GPU time reported by the tenant's hooks (fetch_add, relaxed), measured
  // with CUDA events. Monotonic; the daemon reads differences. Accounting only, no ordering.
  std::atomic<uint64_t> gpu_time_ns;

  // Counters below are since minor 1. All are monotonic while the tenant exists; the daemon
  // zeroes them (with gpu_time_ns) when it gives a free tenant entry to a new tenant.

  // Nanoseconds threads of the tenant spent blocked waiting for this GPU's token, summed
  // over threads (two threads waiting one second each add two seconds). Added by hooks
  // (fetch_add, relaxed) in token_acquire's slow path: the time since the wait began, or
  // since the last addition, at each wake-up and when the wait ends, so a long wait shows
  // while it lasts. Never on the fast path. Read by the CLI and the metrics.
  std::atomic<uint64_t> wait_ns;
  // Allocations on this GPU the tenant's hooks failed with CUDA_ERROR_OUT_OF_MEMORY
  // because the tenant's quota would have been exceeded (memory_try_reserve said
  // kOverQuota). Incremented by hooks (fetch_add 1, relaxed), once per refused call.
  std::atomic<uint64_t> oom_refusals;
  // Times the daemon gave this GPU's token to the tenant. Written by the daemon only.
  std::atomic<uint64_t> token_grants;
  // Share of this GPU's time the tenant used over the last Segment::share_window_ns:
  // reported GPU time in the window / the window's length, in millionths, at most 1e6.
  // Published by the daemon (store, relaxed) a few times a second.
  std::atomic<uint32_t> achieved_share_ppm;
  // Since minor 2. Written by the daemon (store, relaxed) at each step; read by hooks.
  std::atomic<uint32_t> flags;
  // The tenant reached its limit on this GPU: it may not take the token itself.
  static constexpr uint32_t kCapped = 1u << 0;
  // Since minor 3, written by the daemon only. What the driver says the tenant's processes
  // hold on this GPU beyond its quota and the watchdog's allowance (0: within), as the usage
  // watchdog last found it; and how many of its processes the watchdog killed for it
  // (`on_violation: kill`), monotonic while the tenant exists.
  std::atomic<uint64_t> over_quota_bytes;
  std::atomic<uint32_t> watchdog_kills;
  // Since minor 4. MiB of this GPU's memory the tenant's suspensions moved to host memory and
  // its resumptions moved back, both ways added (memory preemption). Written by the daemon
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
  // 0 low, 1 normal, 2 high: information for the CLI, the daemon keeps its own copy.
  std::atomic<uint32_t> priority;
  // Per-GPU quota, as bytes (kUnlimited: none) ...
  std::atomic<uint64_t> memory_quota;
  // ... or, when non-zero, as millionths of the card's memory: used when the configuration
  // says "25%" and the daemon does not know the card's size; each hook resolves it against
  // the device total it queried from the driver.
  std::atomic<uint32_t> memory_quota_ppm;
  // Since minor 4: memory preemption. Bits 0-7: the tenant's suspension state (kRunning ...
  // kFailed below); kPreemptible: the configuration lets it be suspended. Written by the
  // daemon (store, relaxed) as the state changes; read by the CLI and the metrics.
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
  // Since minor 1, written by the daemon (relaxed) with the other parameters, before
  // `state`; information for the CLI and the metrics (the daemon keeps its own copy).
  // Share of the GPU guaranteed under contention, in millionths: the configured share, or
  // the part of what explicit shares leave that a tenant without one gets.
  std::atomic<uint32_t> share_ppm;
  // Cap on the tenant's GPU time in millionths; 1'000'000 means uncapped.
  std::atomic<uint32_t> limit_ppm;
  // Since minor 4, memory preemption's counters, written by the daemon (relaxed), monotonic
  // while the tenant exists (zeroed with the others for a new tenant): suspensions that
  // completed; nanoseconds suspended (completed suspensions, and the current one as of the
  // daemon's last update, a few times a second); nanoseconds the daemon spent suspending and
  // resuming (from the first driver call to the last, all processes together).
  std::atomic<uint64_t> suspensions;
  std::atomic<uint64_t> suspended_ns;
  std::atomic<uint64_t> suspend_ns;
  std::atomic<uint64_t> resume_ns;
  TenantGpu gpu[kMaxGpus];
};

// One registered process. Identity is written by the daemon before it replies to the
// registration; from then on the process writes only `charged` and `gpu_flags`.
struct alignas(64) ProcessSlot {
  enum State : uint32_t { kFree = 0, kActive = 1 };
  std::atomic<uint32_t> state;   // daemon: kActive before the reply, kFree after cleanup
  std::atomic<uint32_t> tenant;  // daemon, at registration
  std::atomic<int32_t> pid;      // daemon, from SO_PEERCRED
  uint32_t reserved0;
  // Process start time in clock ticks after boot (/proc/pid/stat, field 22): pid plus start
  // time names a process uniquely even after the pid is reused.
  std::atomic<uint64_t> start_time;
  // Incremented by the daemon each time the slot is handed out; the registration reply
  // carries the value, so a process can tell its slot apart from a later reuse.
  std::atomic<uint64_t> generation;

  // Bytes this process has reserved per GPU (its share of TenantGpu::memory_used).
  // Written by the process: after a successful reserve it adds, before a release it
  // subtracts, so a kill between the two steps leaks into the tenant counter (safe: the
  // quota errs on the strict side) and never gives back bytes that were not charged.
  // Read by the daemon when the process is gone, to give them back.
  std::atomic<uint64_t> charged[kMaxGpus];

  // Per GPU: bits 0-15 count the process's threads blocked waiting for the token (add/sub
  // by the waiting thread); bit kBusy says the process has work queued or running on the
  // GPU (set when it holds the token and launches, cleared when its hook saw the work
  // drain; never set by waiting). Read by the daemon at every step: a tenant has demand for
  // a GPU when one of its processes waits or is busy; a revoked holder has drained when
  // none of its processes is busy, whether or not they also wait.
  std::atomic<uint32_t> gpu_flags[kMaxGpus];
  static constexpr uint32_t kWaitersMask = 0xFFFF;
  static constexpr uint32_t kBusy = 1u << 16;

  // Since minor 4. What the driver's checkpoint cannot move that this process uses (never
  // cleared while it lives): its tenant is never suspended. Written by the process (fetch_or).
  std::atomic<uint32_t> checkpoint_flags;
  static constexpr uint32_t kUsesIpc = 1u << 0;      // CUDA IPC memory, exported or imported
  static constexpr uint32_t kUsesManaged = 1u << 1;  // managed memory
  static constexpr uint32_t kUsesMps = 1u << 2;      // an MPS client
  // Since minor 4. The daemon's answer to the process's last MemoryRequest
  // (socket_protocol.h): (request sequence << 8) | MemoryDecision, stored (release) by the
  // daemon and then FUTEX_WAKE. The process waits on it (FUTEX_WAIT) until its sequence shows.
  std::atomic<uint32_t> memory_decision;
  uint8_t reserved1[24];
};
// ProcessSlot::memory_decision's low byte.
enum class MemoryDecision : uint32_t {
  kRetry = 1,    // memory was freed for the request: allocate again
  kRefused = 2,  // nothing will be freed: the allocation fails
};

struct Segment {
  // Header: written once by the daemon before `state` becomes kRunning.
  uint64_t magic;
  uint16_t abi_major;
  uint16_t abi_minor;
  uint32_t total_size;  // sizeof(Segment) of the writer; readers require >= their own
  std::atomic<uint32_t> state;  // DaemonState; store(release) by the daemon
  uint32_t reserved0;
  // Unique per daemon start; the registration reply carries it and a hook checks it after
  // mapping, so it never uses a segment left behind by an earlier daemon.
  uint64_t generation;
  uint64_t quantum_ns;  // information for the CLI
  // Since minor 1; written once before `state` becomes kRunning; information for the CLI.
  uint64_t share_window_ns;  // the window TenantGpu::achieved_share_ppm is measured over
  int32_t daemon_pid;        // in the daemon's pid namespace
  uint32_t flags;            // kEphemeral: tenants come from `cuslice run`, not a file
  static constexpr uint32_t kEphemeral = 1u << 0;
  // Since minor 4 (was reserved, zero). How long a hook whose allocation does not fit the card
  // may wait for the daemon to suspend preemptible tenants (a MemoryRequest): 0 while no
  // tenant is preemptible or the daemon cannot suspend (no checkpoint API). Written by the
  // daemon (relaxed) at start and on reload; read by hooks on that slow path.
  std::atomic<uint64_t> allocation_wait_ns;

  GpuState gpus[kMaxGpus];
  Tenant tenants[kMaxTenants];
  ProcessSlot processes[kMaxProcesses];
};

static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<int32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint32_t>) == 4 && sizeof(std::atomic<uint64_t>) == 8);
static_assert(std::is_standard_layout_v<Segment>);
static_assert(kMaxTenants <= 64, "waiting_tenants is a 64-bit mask");
static_assert(sizeof(GpuState) == 64);
static_assert(sizeof(TenantGpu) == 64);
static_assert(sizeof(Tenant) == 64 + 64 + kMaxGpus * 64);
static_assert(sizeof(ProcessSlot) == 256);
static_assert(offsetof(Segment, gpus) == 64);
// Where minor 1 put its fields: in what was padding, so no minor-0 field moved.
static_assert(offsetof(Segment, share_window_ns) == 40);
// Where minor 4 put its fields.
static_assert(offsetof(Segment, allocation_wait_ns) == 56 && offsetof(Tenant, preemption) == 20 &&
              offsetof(Tenant, suspensions) == 96 && offsetof(Tenant, resume_ns) == 120 &&
              offsetof(TenantGpu, moved_mib) == 60);
static_assert(offsetof(ProcessSlot, checkpoint_flags) == 224 && offsetof(ProcessSlot, memory_decision) == 228);
static_assert(offsetof(GpuState, memory_total) == 24 && offsetof(GpuState, uuid) == 32);
static_assert(offsetof(TenantGpu, wait_ns) == 16 && offsetof(TenantGpu, achieved_share_ppm) == 40);
static_assert(offsetof(GpuState, preempt_priority) == 48 && offsetof(TenantGpu, flags) == 44);
static_assert(offsetof(GpuState, unhooked_bytes) == 56 && offsetof(TenantGpu, over_quota_bytes) == 48);
static_assert(offsetof(Tenant, name) == 24 && offsetof(Tenant, share_ppm) == 88 &&
              offsetof(Tenant, gpu) == 128);
static_assert(sizeof(Segment) ==
              64 + kMaxGpus * sizeof(GpuState) + kMaxTenants * sizeof(Tenant) +
                  kMaxProcesses * sizeof(ProcessSlot));

// True when `s` (mapped with `mapped_size` bytes) is a published segment this code can use.
inline bool compatible(const Segment& s, size_t mapped_size) {
  return mapped_size >= sizeof(Segment) && s.magic == kMagic && s.abi_major == kAbiMajor &&
         s.total_size >= sizeof(Segment) &&
         s.state.load(std::memory_order_acquire) == static_cast<uint32_t>(DaemonState::kRunning);
}

}  // namespace cuslice::shm
