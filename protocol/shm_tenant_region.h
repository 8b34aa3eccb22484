// A tenant region (protocol/shm_protocol.h): the memory a tenant's hooks write, its per-GPU
// use and one record per registered process, with the seals it carries. Nothing in here is
// in the segment, which hooks only read; its layout is checked in shm_protocol.h.
#pragma once

#include <fcntl.h>  // F_SEAL_*

#include <atomic>
#include <cstdint>

#include "protocol/shm_limits.h"

namespace cuslice::shm {

// The seals every tenant region carries before it leaves the daemon.
inline constexpr unsigned kTenantRegionSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

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
  std::atomic<uint64_t> memory_total, uuid[2];
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
  // kWaitersMask and kBusy (shm_limits.h). Written by the process's threads (add, sub, or, and;
  // seq_cst, so that the daemon's scan after a kick sees them); zeroed by the daemon at
  // registration and release; read by the daemon at every step.
  std::atomic<uint32_t> gpu_flags[kMaxGpus];
  // kUses* (shm_limits.h): what the driver's checkpoint cannot move that this process uses (never
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
  std::atomic<uint32_t> move_flags, move_done;
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

}  // namespace cuslice::shm
