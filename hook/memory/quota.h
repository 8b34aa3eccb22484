// Where a quota is checked: one ledger per device, charged before the driver is asked for
// memory and credited after the driver has freed it.
//
// The check and the reservation are one compare-and-swap on the device's `used` counter, so
// no interleaving of threads can take the process over its limit. Everything that holds
// device memory is charged here: allocations (memory_hooks.cpp), pool and graph reserves
// (pool_accounting.cpp) and contexts (context_hooks.cpp, what the driver says they hold).
// A charge leaves the headroom (CUSLICE_CONTEXT_HEADROOM) free of the limit, for memory the
// driver takes without an allocation call; in a tenant, of the tenant's quota once for all
// its processes, together with what the tenant keeps free for its processes' memory not yet
// measured and their warm-ups (the reconciliation, below). When a reservation is refused,
// the slow path first brings the ledger to the truth (pools measured to what they really
// reserve, the process's usage read from NVML, the tenant reconciled) and retries.
//
// May call driver, allocation_table, process_usage, scheduler_link, settings, log and the
// client. Pool reserves are kept by pool_accounting, which sits above (it charges here):
// this file reaches them only through set_pool_reserves().
#pragma once

#include <cstdint>

namespace cuslice::quota {

inline constexpr uint64_t kUnlimited = ~uint64_t{0};
// The driver rounds each allocation of 2 MiB or more up to whole 2 MiB pages and packs
// smaller ones together into shared 2 MiB pages (measured on an H100, driver 580).
inline constexpr uint64_t kGranule = 2ull << 20;
// Stream-ordered pools grow their reserve in 32 MiB steps (same measurement): the most one
// request can add to a pool's reserve is its size rounded up to this.
inline constexpr uint64_t kPoolChunk = 32ull << 20;

inline constexpr uint64_t round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

// Called after the real cuInit succeeded: learns the devices and resolves "25%" limits.
void on_cuda_initialised();

// True when memory is counted at all: a local quota is configured, or the process is in a
// scheduler's tenant. Constant after initialisation; hooks check it first so that otherwise
// they are a plain call to the driver.
bool active();
// True when `device`'s memory is counted (its ledger is kept).
bool accounted(int device);

// The device the current context belongs to, or -1 (no context / driver refused).
int current_device();
// True when the process sees exactly one device (then every allocation is on device 0).
bool single_device();

// The device's limit (kUnlimited when none) and what is charged on it now.
uint64_t limit(int device);
uint64_t used(int device);

// What the application is shown: the device's total is the quota (the local one, or the
// tenant's where smaller), used is what counts against it (the tenant's processes together).
struct View {
  uint64_t total;
  uint64_t used;
};
View view(int device);

// Reserves `bytes` on `device` if that keeps it within its limit; after a refusal runs the
// slow path (refresh) once and retries. Always true for an unlimited device.
bool charge(int device, uint64_t bytes);
// As charge(), without the slow path: false at once when `bytes` do not fit now. For charging
// ahead of need (pool_accounting's credit), where a refusal costs nothing.
bool try_charge(int device, uint64_t bytes);
// Gives back what charge() took.
void uncharge(int device, uint64_t bytes);

// Allocations under kGranule: charged as a group, by the whole pages their total needs,
// instead of a page each (4 KiB allocations would otherwise cost 2 MiB apiece).
// charge_small() returns false if the pages cannot be charged; uncharge_small() undoes it.
bool charge_small(int device, uint64_t bytes);
void uncharge_small(int device, uint64_t bytes);
// What an allocation of `bytes` is charged: whole pages, or its size if it is small.
inline uint64_t allocation_charge(uint64_t bytes) {
  return bytes < kGranule ? bytes : round_up(bytes, kGranule);
}
inline bool charge_allocation(int device, uint64_t charged) {
  return charged < kGranule ? charge_small(device, charged) : charge(device, charged);
}
inline void uncharge_allocation(int device, uint64_t charged) {
  if (charged < kGranule) uncharge_small(device, charged); else uncharge(device, charged);
}
// Corrections from measurement (slow paths only): may take `used` above the limit, which
// then refuses further charges until memory is freed.
void adjust(int device, int64_t delta);

// Brings the ledger to the truth: measures pool reserves and accounts memory the process
// holds that no hook saw (context growth, lazily loaded modules), measured through NVML.
// Not for hot paths (takes a mutex, calls the driver; NVML costs microseconds).
void refresh(int device);

// Contexts: charged an estimate (CUSLICE_CONTEXT_BYTES) before the driver creates one,
// then calibrated to what the driver reports for the process once it exists.
bool charge_context(int device, uint64_t bytes);
void release_context(int device, uint64_t bytes);
void calibrate_context(int device);
uint64_t context_charge(int device);
// A context was created: in a tenant, the process is young on the device for
// CUSLICE_CONTEXT_WARMUP, and its tenant keeps a headroom more free for it meanwhile
// (kernels loaded at first launches), unless the process needs that room itself.
void begin_warmup(int device);
// Measures pool reserves only (no NVML reading): cheap enough for cuMemGetInfo.
void measure_pools(int device);
// What cuMemGetInfo needs before it shows the view: pools measured, memory held outside
// hooked calls measured again if some was, the tenant's kept-free figure reconciled if it
// keeps some (slow path: NVML readings).
void refresh_view(int device);
// Drops the charges of every allocation on `device` (the driver destroyed them all, as
// cuDevicePrimaryCtxReset does).
void forget_allocations(int device);

// Marks a hook call that changes what the device holds (an allocation or a free, from the
// charge to the driver's answer). Readings of the process's usage may lower a charge only
// when none is under way, since one in progress makes the ledger and the reading disagree.
class Operation {
 public:
  explicit Operation(int device);
  ~Operation();
  Operation(const Operation&) = delete;
  Operation& operator=(const Operation&) = delete;

 private:
  int device_;
};

// Memory held outside any hooked call, as last measured (0: none seen).
uint64_t unexplained(int device);

// fork() child: the child owns no device memory; start from nothing (the limits stay).
void reset_after_fork();

// What the slow paths need of the pools (pool_accounting.cpp; startup.cpp registers it before
// the first charge): measure the device's pool reserves (charging what they hold instead of
// the pre-charges) and return what they hold now; release
// reserve no allocation uses (true if there was such). Called under this file's slow-path
// mutex.
struct PoolReserves {
  uint64_t (*measure)(int device);
  bool (*trim)(int device);
};
void set_pool_reserves(PoolReserves reserves);

}  // namespace cuslice::quota
