// The hook's side of the scheduler protocol: register, then reserve memory and hold GPU
// tokens through the shared memory (shm_protocol.h): the daemon's segment, mapped read-only,
// and the tenant region the registration brings, where this process writes.
//
// For libcuslice.so (and for tests that play a hooked process). One process-wide client;
// every function is noexcept, thread-safe, allocation-free and exception-free, so it can be
// called from the hook's extern "C" entry points. Only attach() and maintain() may block
// (briefly, bounded by a timeout); the launch and allocation functions make no system call
// on their fast paths.
//
// What the hook calls where
//   - First CUDA call (lazily, from the pthread_once that initialises the hook): attach().
//     kNoDaemon / kFailed: keep going on local limits (CUSLICE_MEMORY_LIMIT), compute
//     ungated, warn once. kRefused or kBusy: fail the CUDA call with an error and log
//     last_error(): a process the scheduler cannot take never runs past it.
//   - After learning a device's total memory and UUID (cuDeviceTotalMem, cuDeviceGetUuid):
//     set_device().
//   - Allocation: memory_try_reserve() before the driver allocates, memory_release() after a
//     free or when the driver's allocation failed. kUngated means "no tenant quota now":
//     apply the local limit instead.
//   - Launch on a stream that is not capturing: token_acquire() before forwarding the
//     launch. Never on a capturing stream (capture runs nothing).
//   - When the process's queued work on a GPU has drained (an event query or sync shows
//     it): token_release(); and report_gpu_time() with the event-measured GPU time.
//   - Any non-hot path that runs now and then (allocation slow path, context creation,
//     synchronize): maintain(), which notices a lost daemon and re-attaches at most every
//     kReattachIntervalSeconds.
//   - pthread_atfork child handler: after_fork_child(). At exit: detach() (optional).
//
// Fallback: whenever the client is detached (daemon absent, stopped or restarting) token
// calls return at once, reserve returns kUngated, and the process runs as if cuslice had no
// scheduler. The client keeps counting the process's reserved bytes regardless, so that
// after re-attaching the new daemon charges them to the tenant.
//
// Defined in client_attach.cpp (attach, maintain, detach, fork, set_device),
// client_memory.cpp (reservation and the tenant's quota), client_token.cpp (the token and
// GPU time), client_peers.cpp (the other registered processes), client_preemption.cpp
// (room for allocations, suspension) and client_moves.cpp (the fast suspension's orders); the state they share is
// in client_state.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cuslice::client {

enum class AttachStatus {
  kAttached,  // the scheduler gates this process
  kNoDaemon,  // nobody listens on the socket: run on local limits, try again later
  kRefused,   // the daemon has no tenant for this process; last_error() says why. Final.
  kFailed,    // protocol or mapping failure; last_error() says why. Tried again later.
  // The scheduler is there but has no room for this process (its process slots, or its
  // tenant's share of them, are taken; it is not accepting connections, or does not answer
  // in time). attach() tries again for up to kBusyWaitSeconds first; last_error() says why.
  kBusy,
};

// How long a first attach() waits for room in a busy scheduler before it gives up.
inline constexpr int kBusyWaitSeconds = 5;

enum class Reserve {
  kOk,         // charged to the tenant; release it with memory_release()
  kOverQuota,  // the tenant's quota on this GPU would be exceeded: fail the allocation
  kUngated,    // no tenant quota applies now: enforce the local limit
};

enum class Event { kLost, kReattached };
// Called (from whichever thread noticed) when the daemon goes away or the client attaches
// again; lets the hook log its one warning. Must not call back into the client.
using EventCallback = void (*)(Event event, const char* detail);

inline constexpr int kReattachIntervalSeconds = 2;

// Registers with the daemon at $CUSLICE_SOCKET (default /run/cuslice/cuslice.sock) as tenant
// $CUSLICE_TENANT (or by the daemon's match rules), maps the segment (read-only; refused
// unless the daemon's user or root owns it) and the tenant region the reply carries. Bounded:
// gives up after about 500 ms. Calling it while attached returns kAttached.
AttachStatus attach() noexcept;
bool attached() noexcept;
// The reason of the last failed attach, or "" (static storage; valid until the next attach).
const char* last_error() noexcept;
void set_event_callback(EventCallback callback) noexcept;

// Re-checks the connection and re-attaches when due. Cheap (one clock read) when there is
// nothing to do.
void maintain() noexcept;
// Leaves the scheduler: gives back this process's memory and tokens now instead of when
// the process exits.
void detach() noexcept;
// In the child of fork(): forgets the parent's registration and reserved bytes (the child
// owns no device memory) without touching the parent's connection. The child attaches
// again, under its own pid, at its first CUDA call.
void after_fork_child() noexcept;

// The card's memory (needed for tenant quotas written as a percentage) and its UUID (the
// metrics' gpu label; may be null), reported in the tenant region; the daemon publishes them
// in the segment for the CLI and the metrics.
void set_device(int gpu, uint64_t total_bytes, const unsigned char uuid[16]) noexcept;

// keep_free: bytes of the quota the reservation must leave free (the hook's headroom for
// memory the driver takes without an allocation call, kept once for the whole tenant),
// besides the tenant's kept_free (shm::TenantGpuUse). *crossed (if given) is set when the
// reservation carried the tenant's counter past one of the sixteenths of its quota.
Reserve memory_try_reserve(int gpu, uint64_t bytes, uint64_t keep_free = 0, bool* crossed = nullptr) noexcept;
void memory_release(int gpu, uint64_t bytes) noexcept;
// Counts one allocation the hook refused because the tenant's quota was full (once per
// refused call, however often it retried).
void note_oom_refusal(int gpu) noexcept;
// Adds bytes the process was found to hold (measured, not asked for) even past the quota;
// release them with memory_release() like reserved ones.
void memory_charge(int gpu, uint64_t bytes) noexcept;
// The tenant's quota on this GPU in bytes (kUnlimited = UINT64_MAX when it has none, or
// when detached) and what all its processes hold there now: what the hook shows as the
// device's total and used memory.
uint64_t tenant_memory_quota(int gpu) noexcept;
uint64_t tenant_memory_used(int gpu) noexcept;

// What the tenant keeps free of its quota on `gpu` besides the headroom
// (shm::TenantGpuUse::kept_free; 0 when detached), and its reconciliation (slow paths): the
// tenant's registered processes with what each has charged on `gpu` and whether it is young
// there at `now_ns` (at most `max`; returns how many), then the new value, stored only if the
// word still holds `expected` (false: it changed, compute again).
uint64_t tenant_memory_kept(int gpu) noexcept;
struct TenantProcess {
  int32_t pid;     // as the daemon saw it (its pid namespace)
  bool young;
  bool self;
  uint64_t charged;
};
size_t tenant_processes(int gpu, int64_t now_ns, TenantProcess* out, size_t max) noexcept;
bool tenant_memory_replace_kept(int gpu, uint64_t expected, uint64_t desired) noexcept;
// This process created a context on `gpu`: it is young there until `until_ns` (or later, if
// it already was), and its tenant keeps `allowance` more free for it unless it was young
// there already. Returns whether the allowance was added. No-op when detached.
bool memory_begin_warmup(int gpu, int64_t now_ns, int64_t until_ns, uint64_t allowance) noexcept;
// Gives up this process's warm-up allowance on `gpu` (its own reservation needs the room):
// true if it was young there. The tenant's kept_free drops at the next reconciliation.
bool memory_end_warmup(int gpu) noexcept;

// Returns when this process's tenant holds the GPU's token, or when gating is off. Fast
// path (the tenant holds it): atomic loads and, when the process was idle, one atomic store.
// Slow path: publishes the demand, kicks the daemon and waits; a tenant that outranks the
// holder gets the token at the daemon's next step (shm_protocol.h, "Priority takeover").
void token_acquire(int gpu) noexcept;
// For a launch the hook can hold back on the GPU instead of here (activity.h, parking):
// true when this process's tenant holds the token (setting kBusy, as token_acquire), or when
// gating is off; false: the tenant waits, and its demand is published as one waiting thread
// would publish it (counted once per process and GPU, until token_unpark), so the daemon
// grants the token with no thread blocked. Never blocks.
bool token_try(int gpu) noexcept;
// The process no longer has work held back for the token on this GPU (it has the token, or
// nothing is held back): withdraws the demand token_try published.
void token_unpark(int gpu) noexcept;
// This process has no more queued work on the GPU. If its tenant holds the token and others
// wait, the daemon is told at once so it can hand the token on early.
void token_release(int gpu) noexcept;
// Adds GPU time (nanoseconds, as measured by CUDA events) to the tenant's account.
void report_gpu_time(int gpu, uint64_t ns) noexcept;
// True when a tenant of lower priority than this process's waits for the GPU: a drained
// holder then gives the token up at once (it would preempt again when it comes back, so
// keeping it through a pause only makes the other wait).
bool lower_priority_waiting(int gpu) noexcept;

// Memory preemption (docs/design/preemption.md), slow paths only. How long an allocation that did
// not fit the card may wait for the scheduler to free memory: 0 when it may not (detached, or
// the scheduler suspends nobody).
int64_t allocation_wait_ns() noexcept;
enum class MemoryAnswer {
  kRetry,     // memory was freed: allocate again
  kRefused,   // nothing will be freed
  kTimedOut,  // no answer before the deadline
  kDetached,  // no scheduler to ask
};
// Asks the scheduler to free `bytes` on `gpu`, where the driver reported `free_bytes` free,
// and waits (a futex on the process's slot) for its answer until deadline_ns (CLOCK_MONOTONIC).
MemoryAnswer request_memory(int gpu, uint64_t bytes, uint64_t free_bytes, int64_t deadline_ns) noexcept;
// This process uses something the driver's checkpoint cannot move (shm::ProcessSlot::kUses*):
// the scheduler never tries to checkpoint it (docs/design/preemption.md). Kept across re-attaches.
void note_checkpoint_blocker(uint32_t flag) noexcept;
// What this process tells MPS when the scheduler sent it to its MPS server
// (wire::RegisterReply::kJoinMps, shm_spatial.h): false when it did not, or when detached.
struct MpsSettings {
  const char* pipe_directory = nullptr;  // in the segment: valid while the attachment is
  uint32_t sm_percent = 100;
  uint32_t client_priority = 0;
  uint32_t memory_limit_mib = 0;  // 0: none
};
bool mps_settings(MpsSettings& out) noexcept;
// GPUs the scheduler's MPS server shows its clients (spatial and known to the daemon), or 0.
int spatial_device_count() noexcept;
// Whether the configuration lets the scheduler suspend this process's tenant (false when
// detached).
bool tenant_preemptible() noexcept;
// Returns at once unless this process's tenant is being suspended, is suspended or is being
// resumed (shm::Tenant::preemption); then waits (a futex on that word, which the daemon wakes)
// until it runs again, the scheduler goes away, or the tenant is gone. The fast path is two
// atomic loads: callable on allocation paths. A process that joins a suspended tenant calls
// it before it touches the GPU, so that it holds nothing there while its tenant's memory is
// given back. True when it waited.
bool wait_while_suspended() noexcept;

// The fast suspension (docs/design/preemption.md, "Two ways to suspend"), for the hook's mover thread.
// Whether the daemon lets this process back its memory so that it can move it
// (shm::ProcessSlot::kFastAllowed); the pinned host memory it may prepare for that and what the
// host must keep available, in bytes. False and 0 when detached.
bool fast_allowed() noexcept;
uint64_t host_pool_bytes() noexcept;
uint64_t host_reserve_bytes() noexcept;
struct MoveOrder {
  const void* attachment = nullptr;  // the registration it came on: a new one starts afresh
  uint32_t sequence = 0;
  uint32_t kind = 0;  // shm::MoveOrder; 0: none
  int gpu = 0;
  uint64_t bytes = 0;
};
// The registration's latest order, without waiting (kind 0 when detached or none yet).
MoveOrder current_move_order() noexcept;
// Waits up to timeout_ns for an order other than `seen` (same registration) and returns the
// latest; kind 0 when none came (or the client detached).
MoveOrder wait_move_order(const MoveOrder& seen, int64_t timeout_ns) noexcept;
// What this process can move: publishes kMovable with its figures (all GPUs).
void report_movable(uint64_t movable_bytes, uint64_t moved_bytes, uint64_t pool_bytes) noexcept;
// The same without the pool, as an allocation or a free changes them (kMovable already set by
// the mover, or set by it soon).
void report_movable(uint64_t movable_bytes, uint64_t moved_bytes) noexcept;
// Order `order` ended with `result` (shm::MoveResult) after `ns`: published, then the daemon is
// kicked so that it looks at once. Nothing when the order came on an earlier registration.
void finish_move(const MoveOrder& order, uint32_t result, uint64_t moved_bytes, uint64_t ns) noexcept;

// Who else has processes registered (any GPU): another tenant, one of higher priority than
// this process's, one of the same or lower priority, another process of its own; whether its
// tenant's GPU time is capped; and the time slice the daemon wants below a higher-priority
// tenant.
// Scans the process slots: call it now and then, not per launch.
struct Neighbours {
  bool others = false;
  bool higher = false;
  bool peers = false;     // another tenant that does not outrank this one
  bool siblings = false;  // another process of this process's tenant
  bool capped = false;    // the tenant has a `limit` below the whole GPU
  uint32_t lower_timeslice_us = 0;  // the daemon's Segment::lower_timeslice_us
};
Neighbours neighbours() noexcept;
// True while this process's tenant holds `gpu`'s token.
bool holding(int gpu) noexcept;
// True when `pid` is a registered process of this process's tenant (false when detached).
bool tenant_pid(int pid) noexcept;

}  // namespace cuslice::client
