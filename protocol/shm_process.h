// One registered process's slot in the segment (protocol/shm_protocol.h): who it is, and
// the daemon's answers and orders to it (its memory requests, the fast suspension). The
// daemon alone writes it; what the process writes about itself is its ProcessUse record
// (protocol/shm_tenant_region.h). Its layout is checked in shm_protocol.h.
#pragma once

#include <atomic>
#include <cstdint>

#include "protocol/shm_limits.h"

namespace cuslice::shm {

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
  std::atomic<uint32_t> move_policy, host_pool_mib, host_reserve_mib;
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

}  // namespace cuslice::shm
