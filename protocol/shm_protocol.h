// THE shared memory between cuslice-scheduler and every hooked process on a node.
//
// This header is the only definition of the layout: the daemon, the client library linked
// into the hook and the CLI all include it. Change it only together with kAbiMajor (any
// incompatible change: a field moved, resized or re-purposed) or kAbiMinor (a field added in
// space that was reserved and zero before, so older readers stay correct).
//
// Two kinds of region, one trust boundary
//   - The segment (struct Segment), one per daemon: shm_open()ed under its name (default
//     "/cuslice", so /dev/shm/cuslice), mode 0644, owned by the daemon's user. The daemon
//     alone writes it. Hooks and `cuslice status` open it O_RDONLY and map it PROT_READ; a
//     hook refuses a segment owned by anyone but the daemon's user (the uid SO_PEERCRED
//     reports for the socket's peer) or root, or writable by group or others. It holds what
//     a tenant is allowed and what everybody may see: the header, each GPU's token state,
//     the tenant definitions (quota, priority, share, limit), the process table (who is
//     registered, in which tenant), and each tenant's usage and counters as the daemon
//     publishes them for `cuslice status` and the metrics.
//   - A tenant region (struct TenantRegion), one per tenant: a memfd the daemon creates,
//     sizes and seals (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL: its size never changes
//     under a mapping, so nobody can make the daemon SIGBUS), and hands to a process over the
//     socket (SCM_RIGHTS, beside the RegisterReply) only once it accepted that process into
//     that tenant. It has no name: a process holds a tenant's region only if the daemon gave
//     it, or if a process of that tenant passed it on. It holds what hooks write: the
//     tenant's memory counter (the quota's compare-exchange) and what it keeps free of its
//     quota, its GPU time, time waited and refused allocations, the card's size and UUID as
//     its hooks learnt them, and one record per registered process (charged bytes, per-GPU
//     flags, warm-up marks). A new tenant entry always gets
//     a new region: a process that once belonged to the entry's previous tenant cannot
//     write the new one's.
//
// Who does what
//   - The daemon creates the segment, fills it, then publishes it by storing
//     DaemonState::kRunning. It is the only writer of every word in it.
//   - A hook registers over the Unix socket (socket_protocol.h); the reply names the segment,
//     the process slot and the tenant, and carries the tenant region's descriptor. A hook
//     writes only its tenant region: the tenant's counters and its own process record.
//   - The daemon maps every tenant region read-write and treats it as hostile input: it
//     never takes an index, a size or a pointer from one (a process's slot and tenant are in
//     its own memory and in the segment), subtracts with saturation, bounds what it adds to
//     its own accounts, and publishes copies in the segment (Tenant::gpu) for the readers
//     that must not see a region: `cuslice status`, the metrics, other tenants' hooks.
//   - Nothing in here is a lock. A process killed at any instruction leaves every word
//     meaningful; the daemon, which learns of the death from the socket, repairs what the
//     dead process owned (its record, its charged memory, the token of its tenant).
//
// What a tenant's processes can still do to their own tenant: misreport its usage (the hook
// runs in the tenant's process and is the quota's enforcer; a process without the hook is
// not gated at all), and spoil its own counters. What they cannot do: change what the tenant
// is allowed, touch another tenant's records, take the token, or crash the daemon.
//
// Priority preemption. A tenant that outranks whoever has work on a GPU (the holder, or the
// tenant whose queued work is draining) and is not capped gets the token without waiting for
// a slice to end or for the holder's queue to drain: its hook publishes the claim as any
// waiter does (the waiting count in its process record, ProcessUse::gpu_flags) and kicks
// the daemon over the socket; the daemon, which wakes on every kick, sees the waiting
// outranking tenant in that step and stores it as the holder at once (TokenPolicy::adopt).
// Lower-priority hooks learn it from `holder` at their next launch, as from any revocation:
// their launch fast path stays one load of `holder`. The cost against a hook taking the
// token itself (minor 2 of ABI 1, impossible with a read-only segment) is one round trip
// through the daemon: the kick's send, the daemon's wake-up and step, the futex wake. The
// alternative, a claim word that lower-priority hooks read on their launch path, would need
// every hook to map the regions of every higher-priority tenant (which would then no longer
// be private) and load one more word per launch per such tenant.
//
// All atomics are lock-free and address-free (static_asserts below), which is what makes
// them valid across processes. Futex waits on 32-bit words use the shared (not
// FUTEX_PRIVATE_FLAG) operations, which work on a read-only mapping; see futex.h.
#pragma once

#include <fcntl.h>  // F_SEAL_*

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace cuslice::shm {

inline constexpr uint64_t kMagic = 0x315345'43494C53ull;        // "SLICES1" read as a number
inline constexpr uint64_t kTenantMagic = 0x315445'43494C53ull;  // "SLICET1"
// Major 2: the segment became read-only for hooks, and what hooks write moved to the tenant
// regions; hooks no longer take the token themselves. Minor 1: TenantGpuUse::kept_free and
// ProcessUse::young_gpus / young_until_ns (read and written by hooks only). Minor 2:
// Segment::lower_timeslice_us (0 from an older daemon: hooks leave the driver's slices).
// Minor 3: TenantGpu::share_ppm. Minor 4: the fast suspension's order (ProcessSlot::move_*,
// host_pool_mib, host_reserve_mib) and report (ProcessUse::move_*, moved_bytes, ...), all
// zero from an older peer: no fast path.
inline constexpr uint16_t kAbiMajor = 2;
inline constexpr uint16_t kAbiMinor = 4;

inline constexpr uint32_t kMaxTenants = 64;
inline constexpr uint32_t kMaxProcesses = 1024;
inline constexpr uint32_t kMaxGpus = 16;
inline constexpr uint32_t kNameSize = 64;  // NUL-terminated

inline constexpr uint32_t kNoTenant = UINT32_MAX;
inline constexpr uint64_t kUnlimited = UINT64_MAX;
inline constexpr const char* kDefaultName = "/cuslice";

// The segment's file mode: written by the daemon's user only, readable by every process
// that may register (all local users: the socket decides who joins which tenant).
inline constexpr unsigned kSegmentMode = 0644;

// A process's per-GPU flags (ProcessUse::gpu_flags, published in ProcessSlot::gpu_flags).
// Bits 0-15 count the process's threads blocked waiting for the token (added and subtracted
// by the waiting thread; a launch held back on the GPU while the process waits counts as one,
// see client.h token_try); bit kBusy says the process has work queued or running on the GPU
// (set when it holds the token and launches, cleared when its hook saw the work drain; never
// set by waiting). The daemon reads them at every step: a tenant has demand for a GPU when
// one of its processes waits or is busy; a revoked holder has drained when none of its
// processes is busy, whether or not they also wait.
inline constexpr uint32_t kWaitersMask = 0xFFFF;
inline constexpr uint32_t kBusy = 1u << 16;

// What the driver's checkpoint cannot move that a process says it uses
// (ProcessUse::checkpoint_flags): no checkpoint is tried on it (memory preemption).
inline constexpr uint32_t kUsesIpc = 1u << 0;      // CUDA IPC memory, exported or imported
inline constexpr uint32_t kUsesManaged = 1u << 1;  // managed memory
inline constexpr uint32_t kUsesMps = 1u << 2;      // an MPS client

enum class DaemonState : uint32_t {
  kStarting = 0,  // being filled; hooks must not use it
  kRunning = 1,   // published
  kStopped = 2,   // the daemon exited cleanly; hooks detach and run ungated
};

// ---------------------------------------------------------------------------------------
// The segment: written by the daemon alone.

// One GPU's token. Sits alone in a cache line: every launch of every process reads it.
struct alignas(64) GpuState {
  // Tenant index allowed to launch on this GPU, or kNoTenant (nobody: the previous holder's
  // queued work is draining, or nobody wants the GPU).
  // Written by: the daemon (store, release), always followed by a grant_seq increment.
  // Read by: hooks on every launch, load(acquire). A holder whose tenant is no longer stored
  // here waits before its next launch; work it queued before stays queued (the daemon drains
  // it before granting the next tenant, unless that tenant outranks it: see "Priority
  // preemption" above, and the lower-priority hook keeps such work short,
  // CUSLICE_PREEMPT_QUEUED).
  std::atomic<uint32_t> holder;

  // Futex word: incremented (fetch_add, release) by the daemon after every store to
  // `holder`, then FUTEX_WAKE for all. A hook that waits loads grant_seq (acquire) BEFORE it
  // loads `holder`, and sleeps with FUTEX_WAIT(grant_seq, the value it loaded): if the daemon
  // changed the holder after the hook's check, the increment makes the kernel refuse the
  // sleep (EAGAIN), so no wake-up is ever lost. Wraps around freely.
  std::atomic<uint32_t> grant_seq;

  // Bit t: some process of tenant t is blocked waiting for this GPU (its waiting count in a
  // process record is not zero). Stored (seq_cst) by the daemon at every scheduling step,
  // computed from the process records it just read. Read by the holder's hooks when they go
  // idle, to decide whether the daemon must be told now (a "kick") or can learn it later,
  // and whether a lower-priority tenant waits. A waiter's kick always makes the daemon step
  // after the waiter published its count, so a bit is missing only until that step.
  std::atomic<uint64_t> waiting_tenants;

  // Number of times the token changed hands; statistics for the CLI, written by the daemon.
  std::atomic<uint64_t> handoffs;

  // The card's total memory in bytes, 0 while unknown. Stored (relaxed) by the daemon, once:
  // NVML's figure at start; where NVML does not say, the first tenant region whose hooks
  // reported one (TenantGpuUse::memory_total). Read by the CLI and the metrics, to show a
  // quota given as a share of the card in bytes. A hook's report only changes what is shown:
  // the daemon decides with its own figure, and each hook resolves its tenant's quota against
  // the total its own driver reports.
  std::atomic<uint64_t> memory_total;
  // The card's UUID: CUuuid's bytes 0-7 and 8-15, each memcpy'd into one word (so the words
  // hold them in the machine's byte order); both words 0 while unknown. Stored (relaxed) by
  // the daemon, once, like memory_total; read by the metrics for the `gpu` label. A reader
  // may see one word set and not the other only while the daemon stores them.
  std::atomic<uint64_t> uuid[2];
  // GPU processes that no registered process accounts for (no hook: a static binary,
  // LD_PRELOAD removed) and the memory the driver says they hold, as the daemon's usage
  // watchdog last found them (NVML, about once a second). Stored (relaxed) by the daemon;
  // read by the CLI and the metrics.
  std::atomic<uint32_t> unhooked_processes;
  uint32_t reserved0;
  std::atomic<uint64_t> unhooked_bytes;
};

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
  // Allocations the tenant's hooks refused for its quota (TenantGpuUse::oom_refusals).
  std::atomic<uint64_t> oom_refusals;
  // Times the daemon gave this GPU's token to the tenant.
  std::atomic<uint64_t> token_grants;
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
  std::atomic<uint64_t> suspensions;
  std::atomic<uint64_t> suspended_ns;
  std::atomic<uint64_t> suspend_ns;
  std::atomic<uint64_t> resume_ns;
  TenantGpu gpu[kMaxGpus];
};

// One registered process: its identity, which only the daemon writes. What the process
// writes about itself is its record in the tenant region (ProcessUse, same index).
struct alignas(64) ProcessSlot {
  enum State : uint32_t { kFree = 0, kActive = 1 };
  std::atomic<uint32_t> state;   // kActive (release) before the reply, kFree after cleanup
  std::atomic<uint32_t> tenant;  // at registration
  std::atomic<int32_t> pid;      // from SO_PEERCRED
  uint32_t reserved0;
  // Process start time in clock ticks after boot (/proc/pid/stat, field 22): pid plus start
  // time names a process uniquely even after the pid is reused.
  std::atomic<uint64_t> start_time;
  // Incremented each time the slot is handed out; the registration reply carries the value,
  // so a process can tell its slot apart from a later reuse.
  std::atomic<uint64_t> generation;
  // The daemon's answer to the process's last MemoryRequest (socket_protocol.h): (request
  // sequence << 8) | MemoryDecision, stored (release) by the daemon and then FUTEX_WAKE; zeroed
  // at registration. The process waits on it (FUTEX_WAIT, on its read-only mapping) until its
  // sequence shows.
  std::atomic<uint32_t> memory_decision;
  // The fast suspension (minor 4; docs/design/preemption.md, "Two ways to suspend"): the daemon's
  // order to the process's hook, which moves the process's memory itself. The daemon writes
  // move_bytes and move_order, then increments move_seq (release) and FUTEX_WAKEs it; the
  // hook's mover thread waits on move_seq and answers in its ProcessUse record (move_done).
  std::atomic<uint32_t> move_seq;
  std::atomic<uint64_t> move_bytes;  // kMoveOut: bytes to take off the GPU (0: hold only)
  std::atomic<uint32_t> move_order;  // MoveOrder in bits 0-7, the GPU index in bits 8-15
  // Written by the daemon at registration and at every reload: bit kFastAllowed says the
  // process may back its memory for the fast path (its tenant is preemptible and the
  // configuration does not say `fast: false`); the pinned host memory it may prepare for it
  // (the tenant's host_pool) and what the host must keep available (host_reserve), in MiB.
  std::atomic<uint32_t> move_policy;
  std::atomic<uint32_t> host_pool_mib;
  std::atomic<uint32_t> host_reserve_mib;
  static constexpr uint32_t kFastAllowed = 1u << 0;
  // A copy of the process's ProcessUse::gpu_flags, stored by the daemon at every scheduling
  // step and statistics tick: what the daemon last saw, for the CLI and for tests. The
  // daemon itself decides from the tenant region.
  std::atomic<uint32_t> gpu_flags[kMaxGpus];
  static constexpr uint32_t kWaitersMask = shm::kWaitersMask;
  static constexpr uint32_t kBusy = shm::kBusy;
  static constexpr uint32_t kUsesIpc = shm::kUsesIpc;
  static constexpr uint32_t kUsesManaged = shm::kUsesManaged;
  static constexpr uint32_t kUsesMps = shm::kUsesMps;
};
// ProcessSlot::move_order's low byte.
enum class MoveOrder : uint32_t {
  kMoveOut = 1,  // hold the process's work, then move move_bytes of its memory off the GPU
  kMoveBack = 2,  // move back everything it moved, then let its work go on
};
// ProcessUse::move_result: how the order of sequence move_done ended.
enum class MoveResult : uint32_t {
  kDone = 1,      // as ordered
  kShort = 2,     // held, but moved less than ordered (moved_bytes says how much)
  kDeferred = 3,  // kMoveBack: the GPU has no room for it yet; still held, nothing lost
  kFailed = 4,    // a driver call failed: held; the daemon falls back to the checkpoint
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
  // scheduler.lower_priority_timeslice: the GPU time slice, in microseconds, a hook gives its
  // process's channel groups while a tenant of higher priority is registered (0: the
  // driver's own). Written (relaxed) by the daemon at start and at each reload.
  std::atomic<uint32_t> lower_timeslice_us;
  // Unique per daemon start; the registration reply carries it and a hook checks it after
  // mapping, so it never uses a segment left behind by an earlier daemon.
  uint64_t generation;
  uint64_t quantum_ns;       // information for the CLI
  uint64_t share_window_ns;  // the window TenantGpu::achieved_share_ppm is measured over
  int32_t daemon_pid;        // in the daemon's pid namespace
  uint32_t flags;            // kEphemeral: tenants come from `cuslice run`, not a file
  static constexpr uint32_t kEphemeral = 1u << 0;
  // How long a hook whose allocation does not fit the card may wait for the daemon to suspend
  // preemptible tenants (a MemoryRequest): 0 while no tenant is preemptible or the daemon
  // cannot suspend (no checkpoint API). Written by the daemon (relaxed) at start and on
  // reload; read by hooks on that slow path.
  std::atomic<uint64_t> allocation_wait_ns;

  GpuState gpus[kMaxGpus];
  Tenant tenants[kMaxTenants];
  ProcessSlot processes[kMaxProcesses];
};

// ---------------------------------------------------------------------------------------
// A tenant region: written by the tenant's hooks (and the daemon), read by the daemon.

// A tenant's use of one GPU, as its hooks write it.
struct alignas(64) TenantGpuUse {
  // Bytes reserved on this GPU by all processes of the tenant: the tenant-wide quota counter.
  // Hooks reserve with one compare-exchange loop (fails rather than exceeding the quota) and
  // release with a subtraction that never goes below zero. The daemon subtracts a dead
  // process's charged bytes (saturating), adds the bytes a re-registering process declares
  // (saturating), and stores 0 when the tenant has no process left (which also reclaims
  // bytes leaked by a process killed between its two bookkeeping steps).
  std::atomic<uint64_t> memory_used;
  // Nanoseconds of GPU time the tenant's hooks measured with CUDA events (fetch_add,
  // relaxed). Monotonic; the daemon reads differences at every step.
  std::atomic<uint64_t> gpu_time_ns;
  // Nanoseconds threads of the tenant spent blocked waiting for this GPU's token, summed
  // over threads (two threads waiting one second each add two seconds). Added by hooks
  // (fetch_add, relaxed) in token_acquire's slow path: the time since the wait began, or
  // since the last addition, at each wake-up and when the wait ends, so a long wait shows
  // while it lasts. Never on the fast path.
  std::atomic<uint64_t> wait_ns;
  // Allocations on this GPU the tenant's hooks failed with CUDA_ERROR_OUT_OF_MEMORY
  // because the tenant's quota would have been exceeded (memory_try_reserve said
  // kOverQuota). Incremented by hooks (fetch_add 1, relaxed), once per refused call.
  std::atomic<uint64_t> oom_refusals;
  // The card's memory and UUID as the tenant's hooks learnt them from the driver
  // (cuDeviceTotalMem, cuDeviceGetUuid; same encoding as GpuState): stored (relaxed) by
  // hooks, every hook the same values; read by the daemon, which shows the first it finds in
  // GpuState where it has no figure of its own.
  std::atomic<uint64_t> memory_total;
  std::atomic<uint64_t> uuid[2];
  // Bytes of the quota every process of the tenant leaves free when it reserves, besides its
  // own headroom (CUSLICE_CONTEXT_HEADROOM): what the tenant's processes hold by the driver's
  // count beyond what they charged (memory no hooked call showed, not yet measured by its
  // holder), and the warm-up allowance of each young process (ProcessUse::young_gpus), as the
  // last reconciliation found them. Read by hooks on every reservation (same cache line as
  // memory_used). Written by hooks only: a reconciliation (slow path: a refused reservation,
  // cuMemGetInfo, a sixteenth of the quota crossed) stores what it computed if the word did
  // not change meanwhile (compare-exchange, else it computes again); a process that becomes
  // young adds its allowance (saturating). Too high, it refuses reservations until the next
  // reconciliation, which every refused reservation runs; the daemon never reads it.
  std::atomic<uint64_t> kept_free;
};

// What one registered process writes about itself; same index as its ProcessSlot. Records
// of slots that are not the tenant's own processes are ignored by the daemon.
struct alignas(64) ProcessUse {
  // Bytes this process has reserved per GPU (its share of TenantGpuUse::memory_used).
  // Written by the process: after a successful reserve it adds, before a release it
  // subtracts, so a kill between the two steps leaks into the tenant counter (safe: the
  // quota errs on the strict side) and never gives back bytes that were not charged.
  // Read (exchange 0) by the daemon when the process is gone, to give them back; stored by
  // the daemon at registration (the bytes a re-registering process declares).
  std::atomic<uint64_t> charged[kMaxGpus];
  // kWaitersMask and kBusy, above. Written by the process's threads (add, sub, or, and;
  // seq_cst, so that the daemon's scan after a kick sees them); zeroed by the daemon at
  // registration and release; read by the daemon at every step.
  std::atomic<uint32_t> gpu_flags[kMaxGpus];
  // kUses*, above: what the driver's checkpoint cannot move that this process uses (never
  // cleared while it lives). Written by the process (fetch_or); zeroed by the daemon at
  // registration; read by the daemon's memory preemption as the tenant's word only: it never
  // spares a preemptible tenant (the process is stopped rather than checkpointed when the
  // tenant's memory is needed) unless the configuration says `unsuspendable: keep`.
  std::atomic<uint32_t> checkpoint_flags;
  // Bit g: the process created a CUDA context on GPU g less than CUSLICE_CONTEXT_WARMUP ago
  // (it is young there until young_until_ns, CLOCK_MONOTONIC), and its tenant keeps a warm-up
  // allowance free for it (TenantGpuUse::kept_free): kernel code loaded at first launches
  // takes memory without an allocation call. Written by the process (fetch_or when it creates
  // a context, store of a later young_until_ns; fetch_and when it gives its allowance up);
  // cleared by the process when it registers; read by the tenant's hooks when they reconcile
  // kept_free. Not read by the daemon.
  std::atomic<uint32_t> young_gpus;
  std::atomic<int64_t> young_until_ns;
  // The fast suspension's report (minor 4), written by the process's hook, read by the daemon
  // as the tenant's word: a report the card's free memory does not bear out costs the tenant
  // its fast path (the daemon checkpoints it instead). move_flags: kMovable, the hook backs
  // this process's allocations so that it can move them and takes orders (set once the mover
  // runs). move_done: the sequence of the last order finished (release, after the rest).
  std::atomic<uint32_t> move_flags;
  std::atomic<uint32_t> move_done;
  std::atomic<uint32_t> move_result;  // MoveResult
  uint32_t reserved2;
  std::atomic<uint64_t> moved_bytes;    // off the GPU now, all GPUs
  std::atomic<uint64_t> movable_bytes;  // on the GPU in memory the hook can move, all GPUs
  std::atomic<uint64_t> pool_bytes;     // pinned host memory prepared for moving
  std::atomic<uint64_t> move_ns;        // how long the last order took
  static constexpr uint32_t kMovable = 1u << 0;
  static constexpr uint32_t kUsesIpc = shm::kUsesIpc;
  static constexpr uint32_t kUsesManaged = shm::kUsesManaged;
  static constexpr uint32_t kUsesMps = shm::kUsesMps;
};

struct TenantRegion {
  // Header: written by the daemon before it hands the region out; checked by the hook
  // (magic, major, size, the segment's generation, the tenant index of its reply). The
  // tenant's processes can overwrite it; the daemon never reads it.
  uint64_t magic;  // kTenantMagic
  uint16_t abi_major;
  uint16_t abi_minor;
  uint32_t total_size;           // sizeof(TenantRegion) of the daemon
  uint64_t segment_generation;   // Segment::generation
  uint32_t tenant;               // index into Segment::tenants
  uint32_t reserved0;
  uint8_t reserved1[32];

  TenantGpuUse gpu[kMaxGpus];
  ProcessUse processes[kMaxProcesses];
};

// The seals every tenant region carries before it leaves the daemon.
inline constexpr unsigned kTenantRegionSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<int32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint32_t>) == 4 && sizeof(std::atomic<uint64_t>) == 8);
static_assert(std::is_standard_layout_v<Segment> && std::is_standard_layout_v<TenantRegion>);
static_assert(kMaxTenants <= 64, "waiting_tenants is a 64-bit mask");
static_assert(sizeof(GpuState) == 64);
static_assert(sizeof(TenantGpu) == 64);
static_assert(sizeof(Tenant) == 64 + 64 + kMaxGpus * 64);
static_assert(sizeof(ProcessSlot) == 128);
static_assert(offsetof(Segment, gpus) == 64);
static_assert(offsetof(GpuState, memory_total) == 24 && offsetof(GpuState, uuid) == 32);
static_assert(offsetof(TenantGpu, achieved_share_ppm) == 40 && offsetof(TenantGpu, share_ppm) == 44 &&
              offsetof(TenantGpu, over_quota_bytes) == 48);
static_assert(offsetof(GpuState, unhooked_processes) == 48 && offsetof(GpuState, unhooked_bytes) == 56);
static_assert(offsetof(Tenant, name) == 24 && offsetof(Tenant, share_ppm) == 88 && offsetof(Tenant, gpu) == 128);
static_assert(offsetof(ProcessSlot, gpu_flags) == 64 && offsetof(ProcessSlot, memory_decision) == 32);
static_assert(offsetof(Segment, allocation_wait_ns) == 56 && offsetof(Tenant, preemption) == 20 &&
              offsetof(Tenant, suspensions) == 96 && offsetof(Tenant, resume_ns) == 120 &&
              offsetof(TenantGpu, moved_mib) == 60);
static_assert(sizeof(Segment) ==
              64 + kMaxGpus * sizeof(GpuState) + kMaxTenants * sizeof(Tenant) +
                  kMaxProcesses * sizeof(ProcessSlot));
static_assert(sizeof(TenantGpuUse) == 64 && sizeof(ProcessUse) == 256);
static_assert(offsetof(TenantGpuUse, kept_free) == 56 && offsetof(ProcessUse, checkpoint_flags) == 192 &&
              offsetof(ProcessUse, young_gpus) == 196 && offsetof(ProcessUse, young_until_ns) == 200);
static_assert(offsetof(ProcessSlot, move_seq) == 36 && offsetof(ProcessSlot, move_bytes) == 40 &&
              offsetof(ProcessSlot, host_reserve_mib) == 60);
static_assert(offsetof(ProcessUse, move_flags) == 208 && offsetof(ProcessUse, moved_bytes) == 224 &&
              offsetof(ProcessUse, move_ns) == 248);
static_assert(offsetof(TenantRegion, gpu) == 64);
static_assert(sizeof(TenantRegion) ==
              64 + kMaxGpus * sizeof(TenantGpuUse) + kMaxProcesses * sizeof(ProcessUse));

// True when `s` (mapped with `mapped_size` bytes) is a published segment this code can use.
inline bool compatible(const Segment& s, size_t mapped_size) {
  return mapped_size >= sizeof(Segment) && s.magic == kMagic && s.abi_major == kAbiMajor &&
         s.total_size >= sizeof(Segment) &&
         s.state.load(std::memory_order_acquire) == static_cast<uint32_t>(DaemonState::kRunning);
}

// True when `r` (mapped with `mapped_size` bytes) is the region of `tenant` in the segment
// of `generation`, of a layout this code can use.
inline bool compatible(const TenantRegion& r, size_t mapped_size, uint64_t generation, uint32_t tenant) {
  return mapped_size >= sizeof(TenantRegion) && r.magic == kTenantMagic && r.abi_major == kAbiMajor &&
         r.total_size >= sizeof(TenantRegion) && r.segment_generation == generation && r.tenant == tenant;
}

}  // namespace cuslice::shm
