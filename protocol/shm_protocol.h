// THE shared memory between cuslice-scheduler and every hooked process on a node.
//
// This header, with the records' headers it includes (shm_limits.h, shm_gpu.h,
// shm_tenant.h, shm_process.h, shm_tenant_region.h), is the only definition of the layout:
// the daemon, the client library linked into the hook and the CLI all include it. Change it only together with kAbiMajor (any
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
// Priority takeover. A tenant that outranks whoever has work on a GPU (the holder, or the
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

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

// The records, one header each; this header puts them together. Include this one.
#include "protocol/shm_gpu.h"
#include "protocol/shm_limits.h"
#include "protocol/shm_process.h"
#include "protocol/shm_spatial.h"
#include "protocol/shm_tenant.h"
#include "protocol/shm_tenant_region.h"

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
inline constexpr uint16_t kAbiMinor = 5;

inline constexpr const char* kDefaultName = "/cuslice";

// The segment's file mode: written by the daemon's user only, readable by every process
// that may register (all local users: the socket decides who joins which tenant).
inline constexpr unsigned kSegmentMode = 0644;

enum class DaemonState : uint32_t {
  kStarting = 0,  // being filled; hooks must not use it
  kRunning = 1,   // published
  kStopped = 2,   // the daemon exited cleanly; hooks detach and run ungated
};

// ---------------------------------------------------------------------------------------
// The segment: written by the daemon alone.

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
  // Minor 5: tenants side by side (shm_spatial.h).
  SpatialState spatial;
};

// The segment's spatial record, where its writer has one (minor 5 and later).
inline const SpatialState* spatial_state(const Segment& s) {
  return s.abi_minor >= 5 && s.total_size >= sizeof(Segment) ? &s.spatial : nullptr;
}

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
                  kMaxProcesses * sizeof(ProcessSlot) + sizeof(SpatialState));
static_assert(sizeof(TenantSpatial) == 64 && offsetof(SpatialState, mps_pipe_directory) == 64 &&
              sizeof(SpatialState) == 64 + kPathSize + kMaxTenants * sizeof(TenantSpatial));
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
