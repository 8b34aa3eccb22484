// The simulated driver: every object the fake hands out, the device ledger, and the one mutex
// that guards them. Each entry point (one file per area: context.cpp, memory.cpp, ...) begins
// with
//
//     Session s;                                    // locks the state
//     if (CUresult rc = s.require_init()) return rc;
//
// and then works on s-> under the lock. Entry points never call other entry points; shared work
// is in the helpers declared here and in mem_pools.h, graph_nodes.h and stream_order.h.
//
// Handles are the addresses of the structs below: cuda.h declares CUcontext as a pointer to the
// incomplete `struct CUctx_st` (and so on), and the fake completes those structs. A handle is
// valid while its registry holds it; a stale or forged handle is looked up, never dereferenced.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstdint>
#include <cstddef>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tests/fake_driver/cuda/device_ledger.h"
#include "tests/fake_driver/cuda/device_memory.h"
#include "tests/fake_driver/cuda/device_timeline.h"
#include "tests/fake_driver/cuda/knobs.h"
#include "tests/fake_driver/cuda/mps_client.h"

namespace fake_cuda {

// CLOCK_MONOTONIC ns "at which" work behind a wait not yet satisfied ends: not known yet.
inline constexpr std::int64_t kNever = INT64_MAX;

// When the work before one event record ends: kNever until it is known (the record is behind a
// wait). Shared by the event, the deferred record that sets it and the waits on it, so that
// re-recording or destroying the event leaves them their own record.
using Completion = std::shared_ptr<std::int64_t>;

// A device range a copy or a set reads or writes (checked again when a held copy is placed,
// under FAKE_CUDA_FAULT_ON_UNMAPPED).
struct DeviceRange {
  CUdeviceptr ptr = 0;
  std::size_t bytes = 0;
  bool write = false;
};

// An operation queued on a stream blocked behind a wait on a memory word (stream_order.h): run
// (placed on the timeline) once everything before it on the stream has been.
struct DeferredOp {
  enum class Kind { kKernel, kRecord, kWaitEvent, kWaitValue, kWriteValue, kCopy };
  Kind kind = Kind::kKernel;
  std::int64_t duration_ns = 0;    // kKernel, kCopy
  std::vector<DeviceRange> ranges;  // kCopy: the device memory it touches (its bytes moved at the call)
  Completion completion;           // kRecord: the one it sets; kWaitEvent: the one it waits for
  std::uint32_t* word = nullptr;   // kWaitValue, kWriteValue: host address
  std::uint32_t value = 0;         // kWaitValue, kWriteValue
  unsigned int condition = 0;      // kWaitValue: CU_STREAM_WAIT_VALUE_{GEQ,EQ,AND,NOR}
};

// One stream's queue: the end of the work placed on the timeline, and the work held behind a
// wait that is not satisfied yet (the stream is "blocked" while there is any).
struct Lane {
  enum class Kind { kLegacy, kBlocking, kNonBlocking };
  CUctx_st* ctx = nullptr;  // set with kind whenever the stream is resolved (StreamQueue)
  Kind kind = Kind::kLegacy;
  std::int64_t tail = 0;  // CLOCK_MONOTONIC ns at which the placed work ends
  std::deque<DeferredOp> deferred;
  bool blocked() const { return !deferred.empty(); }
};

// A stream's write of a memory word, reached at a known time still to come.
struct TimedWrite {
  std::uint32_t* word = nullptr;
  std::uint32_t value = 0;
  std::int64_t at = 0;
};

}  // namespace fake_cuda

struct CUctx_st {
  CUdevice device = 0;
  bool primary = false;
  unsigned int flags = 0;
  // Primary contexts only: holders of cuDevicePrimaryCtxRetain. The handle is valid while > 0.
  unsigned int retain_count = 0;
  // Whether FAKE_CUDA_CONTEXT_BYTES are charged. A primary context is inactive before its first
  // retain and after cuDevicePrimaryCtxReset_v2, and is re-activated when next used.
  bool active = false;
  std::size_t module_bytes = 0;  // charged under FAKE_CUDA_CHARGE_MODULE, dropped with the context
  // A kernel of the context touched unmapped memory (FAKE_CUDA_FAULT_ON_UNMAPPED): every later
  // call on it fails with CUDA_ERROR_ILLEGAL_ADDRESS until it is destroyed or reset.
  bool faulted = false;

  // Stream order (stream_order.h): CLOCK_MONOTONIC ns at which the work placed so far ends.
  fake_cuda::Lane legacy;          // the legacy default stream
  std::int64_t blocking_tail = 0;  // the latest of the blocking streams (per-thread ones included)
  std::int64_t all_tail = 0;       // the latest of every stream: what cuCtxSynchronize waits for
  // Per-thread default streams (node-based: a Lane's address is stable).
  std::unordered_map<std::thread::id, fake_cuda::Lane> per_thread;
  // Destroyed streams whose work was still held behind a wait: it still runs, as on a GPU.
  std::list<fake_cuda::Lane> orphans;
};

struct CUstream_st {
  CUctx_st* ctx = nullptr;
  unsigned int flags = 0;
  int priority = 0;
  CUgraph_st* capture = nullptr;  // graph being captured into, or null
  bool capture_invalidated = false;  // something illegal happened during the capture
  fake_cuda::Lane lane;            // its queue (stream_order.h)
};

struct CUevent_st {
  CUctx_st* ctx = nullptr;
  unsigned int flags = 0;
  bool recorded = false;
  fake_cuda::Completion completion;  // of its last record; null: never recorded (complete)
  std::int64_t completes_at() const { return completion ? *completion : 0; }
};

struct CUmod_st {
  CUctx_st* ctx = nullptr;
};

struct CUfunc_st {
  CUmod_st* module = nullptr;
  std::string name;
  std::int64_t duration_ns = 0;  // how long each launch occupies the device (kernel.cpp)
};

// A stream-ordered memory pool, modelled by byte counts (no fragmentation): allocations take
// `used`; when reserved - used cannot hold a request, the reserve grows by whole 2 MiB chunks;
// frees return bytes to `used` only; synchronisation trims the reserve to the release threshold.
struct CUmemPoolHandle_st {
  int device = 0;
  std::size_t max_size = 0;  // 0: bounded by the device only
  std::size_t release_threshold = 0;
  std::size_t reserved = 0;
  std::size_t reserved_high = 0;
  std::size_t used = 0;
  std::size_t used_high = 0;
};

// size: what cuArrayGetMemoryRequirements reports; charged: what the device holds for it (0 for
// sparse and deferred-mapping arrays, which have no memory of their own).
struct CUarray_st {
  CUctx_st* owner = nullptr;
  int device = 0;
  std::size_t size = 0;
  std::size_t charged = 0;
};

struct CUmipmappedArray_st {
  CUctx_st* owner = nullptr;
  int device = 0;
  std::size_t size = 0;
  std::size_t charged = 0;
};

// A memory allocation node, a memory free node or a kernel node of a graph; the other kinds of
// node are not modelled. Dependencies are not kept: a launched graph runs its kernels one after
// the other, which on a device that runs one kernel at a time takes the same time.
struct CUgraphNode_st {
  enum class Kind { kMemAlloc, kMemFree, kKernel };
  Kind kind = Kind::kMemAlloc;
  int device = 0;
  std::size_t bytes = 0;  // kMemAlloc
  CUdeviceptr dptr = 0;   // kMemAlloc, kMemFree
  std::int64_t kernel_ns = 0;  // kKernel
};

struct CUgraph_st {
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;
};

struct CUgraphExec_st {
  std::array<std::size_t, fake_cuda::kMaxDevices> allocation_bytes{};  // 2 MiB-rounded, by device
  bool reserved = false;  // set at the first launch, when the graph pool takes allocation_bytes
  std::int64_t kernel_ns = 0;  // its kernel nodes together: what each launch occupies the device
  unsigned long long kernels = 0;
};

namespace fake_cuda {

inline constexpr std::size_t kGranularity = std::size_t{2} << 20;  // allocation & VMM granularity
inline constexpr int kDriverVersion = 13000;

constexpr std::size_t round_up(std::size_t bytes, std::size_t multiple) {
  return (bytes + multiple - 1) / multiple * multiple;
}

// Objects of one kind, owned here, looked up by handle.
template <class T>
class Registry {
 public:
  T* add(std::unique_ptr<T> item) {
    T* handle = item.get();
    items_.emplace(handle, std::move(item));
    return handle;
  }
  bool contains(const void* handle) const { return items_.count(static_cast<const T*>(handle)); }
  void remove(const T* handle) { items_.erase(handle); }
  template <class Predicate>
  void remove_if(Predicate predicate) {
    std::erase_if(items_, [&](const auto& entry) { return predicate(*entry.second); });
  }
  template <class Visit>
  void for_each(Visit visit) {
    for (auto& [handle, item] : items_) visit(*item);
  }
  void clear() { items_.clear(); }

 private:
  std::unordered_map<const T*, std::unique_ptr<T>> items_;
};

enum class AllocationKind {
  kDevice,     // cuMemAlloc_v2, cuMemAllocPitch_v2: charged, owned by a context
  kManaged,    // cuMemAllocManaged: charged to the allocating device as if resident there
  kPool,       // cuMemAllocAsync / cuMemAllocFromPoolAsync: bytes of a pool, no own charge
  kIpcImport,  // cuIpcOpenMemHandle_v2: memory of the exporter, free for the importer
};

struct Allocation {
  CUdeviceptr base = 0;
  std::size_t size = 0;     // as requested (cuMemGetAddressRange reports it)
  std::size_t charged = 0;  // device memory held on `device` (kPool: bytes taken from the pool)
  int device = 0;
  AllocationKind kind = AllocationKind::kDevice;
  CUctx_st* owner = nullptr;              // freed with this context (kDevice, kManaged, kIpcImport)
  CUmemPoolHandle_st* pool = nullptr;     // kPool only
  int small_page = -1;                    // kDevice/kManaged under kGranularity: its shared page
  bool ipc_exported = false;              // kDevice: cuIpcGetMemHandle was called on it
  // Its bytes (device_memory.h), made at the first copy or set that touches it: shared by the
  // copies of this record, gone when the allocation is erased.
  std::shared_ptr<DeviceBytes> contents;
};

// Allocations under kGranularity share 2 MiB pages, as the real driver packs them (measured
// on an H100: 100 x 4 KiB took one 2 MiB page). First fit; a page is given back to the
// device when its last allocation is freed.
struct SmallPage {
  int device = 0;
  std::size_t used = 0;
  int live = 0;
};

// Physical memory of cuMemCreate, alive while a handle names it or a mapping uses it.
struct PhysicalMemory {
  int id = 0;       // key in DriverState::physical_memory, and the shareable handle
  int device = -1;  // -1: host memory, which no device pays for
  std::size_t size = 0;
  CUmemAllocationHandleType exportable = CU_MEM_HANDLE_TYPE_NONE;
  int handles = 0;   // live entries of DriverState::vmm_handles naming it
  int mappings = 0;  // live entries of DriverState::vmm_mappings using it
  std::unique_ptr<DeviceBytes> contents;  // its bytes (device_memory.h), zero when created
};

struct VmmHandle {
  PhysicalMemory* physical = nullptr;
  unsigned int references = 0;  // cuMemCreate / import: 1; each cuMemRetainAllocationHandle: +1
};

struct VmmMapping {
  std::size_t size = 0;
  std::size_t offset = 0;  // into the physical memory: the mapping shows [offset, offset + size)
  CUmemGenericAllocationHandle handle = 0;
  PhysicalMemory* physical = nullptr;
  // CUmemAccess_flags each device was given by cuMemSetAccess (none until then, as on the real
  // driver: a fresh mapping is not accessible).
  std::array<unsigned char, kMaxDevices> access{};
};

// The graph memory pool of one device: what live executable graphs hold, and what destroyed
// ones left reserved until cuDeviceGraphMemTrim.
struct GraphMemoryPool {
  std::size_t in_use = 0;
  std::size_t idle = 0;
  std::size_t used_high = 0;
  std::size_t reserved_high = 0;
};

struct DriverState {
  DriverState();

  // Back to a fresh process: the state fake_cuda_reset() promises.
  void reset();

  std::mutex mutex;
  bool initialized = false;
  unsigned long generation = 0;  // bumped by reset(); thread-local context stacks compare it
  Knobs knobs;
  DeviceLedger ledger;
  DeviceTimeline timeline;
  CUresult timeline_status = CUDA_SUCCESS;  // what cuInit answers when the timeline failed
  MpsClient mps;  // connected at cuInit under CUDA_MPS_PIPE_DIRECTORY (mps_client.h)

  std::array<std::unique_ptr<CUctx_st>, kMaxDevices> primary_contexts;
  Registry<CUctx_st> created_contexts;
  Registry<CUstream_st> streams;
  Registry<CUevent_st> events;
  Registry<CUmod_st> modules;
  Registry<CUfunc_st> functions;
  Registry<CUmemPoolHandle_st> pools;  // default pools included
  std::array<CUmemPoolHandle_st*, kMaxDevices> default_pools{};
  std::array<CUmemPoolHandle_st*, kMaxDevices> current_pools{};
  Registry<CUarray_st> arrays;
  Registry<CUmipmappedArray_st> mipmapped_arrays;
  Registry<CUgraph_st> graphs;
  Registry<CUgraphExec_st> graph_execs;
  std::array<GraphMemoryPool, kMaxDevices> graph_pools{};

  std::map<CUdeviceptr, Allocation> allocations;  // by base address
  std::vector<SmallPage> small_pages;              // index: Allocation::small_page

  // Charges a kDevice/kManaged allocation (whole pages, or room in a shared page); false
  // when the device lacks the memory. release_allocation gives back what it charged.
  bool charge_allocation(Allocation& allocation);
  void release_allocation(const Allocation& allocation);
  // Pinned host memory, by base address: allocated (cuMemAllocHost_v2, cuMemHostAlloc: our own
  // pages, unmapped when freed) or registered (cuMemHostRegister_v2: the caller's memory). Either
  // belongs to the context current when it was made, and goes with it, as on the real driver
  // (PORTABLE only lets other contexts use it).
  struct HostBlock {
    std::size_t bytes = 0;
    std::size_t mapped = 0;  // allocated: the pages mapped (0: registered)
    CUctx_st* owner = nullptr;
  };
  std::map<std::uintptr_t, HostBlock> host_allocations;
  // Whether [p, p + bytes) lies in one pinned host allocation or registration.
  bool is_host_range(const void* p, std::size_t bytes) const;
  // Unmaps an allocated block (a registered one is the caller's) and forgets it.
  void drop_host_block(std::map<std::uintptr_t, HostBlock>::iterator block);

  // Waits on memory words (stream_order.h): set when a stream may be blocked (cleared by
  // make_progress once none is), the writes reached at a time still to come, and whether the
  // progress thread that runs both in the background is alive.
  bool maybe_blocked = false;
  std::vector<TimedWrite> timed_writes;
  bool progress_thread = false;
  // Wakes the progress thread when a write or a wait is added: it may sleep until a later time.
  std::condition_variable progress_wake;
  std::map<CUdeviceptr, std::size_t> va_reservations;
  std::map<CUdeviceptr, VmmMapping> vmm_mappings;
  // Ranges of live reservations that were mapped, then unmapped, and not mapped again (start,
  // size; disjoint): under FAKE_CUDA_FAULT_ON_UNMAPPED a kernel launched while there is any
  // faults. Forgotten with their reservation.
  std::map<CUdeviceptr, std::size_t> unmapped_ranges;
  std::map<CUmemGenericAllocationHandle, VmmHandle> vmm_handles;
  std::map<int, std::unique_ptr<PhysicalMemory>> physical_memory;  // id: the shareable handle
  int next_physical_id = 1;
  CUmemGenericAllocationHandle next_vmm_handle = 1;

  // What a checkpoint of this process must refuse (process_table.h, Row::flags): live managed
  // allocations, and allocations exported or imported by CUDA IPC. count_checkpoint_blockers
  // adds (delta 1) or removes (-1) one allocation and publishes the flags in the row.
  int managed_allocations = 0;
  int ipc_allocations = 0;
  void count_checkpoint_blockers(const Allocation& allocation, int delta);
  // When this process's submitted work ends (the latest kernel it placed), published in its
  // row with whether some work is held behind a wait: what a checkpoint waits for.
  std::int64_t work_tail = 0;
  void publish_work();

  bool module_loaded = false;  // the process's first launch charged FAKE_CUDA_MODULE_BYTES
  unsigned long long faults = 0;  // contexts poisoned under FAKE_CUDA_FAULT_ON_UNMAPPED
  int proc_address_calls = 0;
  unsigned long long launches = 0;
  unsigned long long busy_ns = 0;  // kernel time this process placed on any device

  // One unified address space for every device, handed out upwards and never reused, with a
  // 2 MiB gap after each range so that neighbours never touch.
  static constexpr CUdeviceptr kFirstAddress = CUdeviceptr{1} << 36;
  CUdeviceptr next_address = kFirstAddress;
  CUdeviceptr take_address_range(std::size_t bytes);

  // --- Validation helpers, for callers holding the lock ------------------------------------------

  bool is_live_context(const CUctx_st* ctx) const;

  // The calling thread's current context, activating a reset primary context on first use.
  // CUDA_ERROR_INVALID_CONTEXT without one; CUDA_ERROR_OUT_OF_MEMORY if re-activation fails.
  CUresult current_context(CUctx_st** ctx);

  // A stream's context: null, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD mean the current one.
  // *stream_out is the CUstream_st, or null for those special streams.
  CUresult stream_context(CUstream stream, CUctx_st** ctx, CUstream_st** stream_out = nullptr);

  // The allocation whose [base, base + size) holds ptr, or null.
  Allocation* find_allocation(CUdeviceptr ptr);

  // The bytes of [ptr, ptr + bytes) as device `device` reads (write: writes) them: the range
  // must lie in one live allocation, or in VMM mappings laid end to end that device was given
  // access to (READ for reading, READWRITE for writing). False when it does not.
  bool device_spans(CUdeviceptr ptr, std::size_t bytes, int device, bool write, Spans* spans);
  // Whether ptr lies in device address space: the addresses handed out so far (allocations,
  // VMM reservations, graph memory, live or freed). A copy's side that does not is host memory
  // (unified addressing); one that does must be live device memory.
  bool in_device_space(CUdeviceptr ptr) const { return overlaps_device_space(ptr, 1); }
  // Whether [p, p + bytes) meets device address space (a host range must not).
  bool overlaps_device_space(std::uintptr_t p, std::size_t bytes) const {
    if (bytes > UINTPTR_MAX - p) return true;  // wraps around: no host range either
    return p < next_address && p + std::max<std::size_t>(bytes, 1) > kFirstAddress;
  }

  // --- Faults (FAKE_CUDA_FAULT_ON_UNMAPPED) --------------------------------------------------------

  // Whether a kernel run now would touch unmapped memory: the knob is set and some reservation
  // has a range that was unmapped and not mapped again.
  bool fault_armed() const { return knobs.fault_on_unmapped && !unmapped_ranges.empty(); }
  // Poisons ctx (CUctx_st::faulted), counts the fault and says so on stderr; what: what faulted.
  void fault(CUctx_st* ctx, const char* what);
  // CUDA_ERROR_ILLEGAL_ADDRESS when the calling thread's current context is poisoned, for calls
  // that need no context in the fake (VMM, frees) but would fail on the real driver.
  CUresult current_context_fault();

  // --- Charges -----------------------------------------------------------------------------------

  // Charges FAKE_CUDA_CONTEXT_BYTES for an inactive context (CUDA_ERROR_OUT_OF_MEMORY if short).
  CUresult activate(CUctx_st* ctx);

  // Releases everything the context owns and its own charge; the handle itself stays.
  void deactivate(CUctx_st* ctx);

 private:
  void build();  // the state of a process that has just loaded the driver
};

// The process's state (built on first use, never destroyed: atexit handlers and other threads
// may call the driver during exit).
DriverState& driver_state();

// The calling thread's stack of current contexts (top = back). Emptied when the state was reset
// since the thread last looked.
std::vector<CUctx_st*>& thread_context_stack(const DriverState& state);

// Runs what waits on memory words let run by now, and stores the writes reached by now
// (stream_order.cpp). Cheap when no stream is blocked and no write is pending.
void make_progress(DriverState& state);

// How often a thread waiting for work held behind a wait on a memory word looks again.
inline constexpr std::int64_t kPollNs = 30'000;

// Locks the state for one entry point, and first lets blocked streams run as far as their
// words allow, as a GPU would have by now.
//
// A driver call first passes the process's checkpoint gate (process_table.h): while another
// process has locked this one (cuCheckpointProcessLock) the call waits there, and in the FAILED
// state it fails (require_init says CUDA_ERROR_ILLEGAL_STATE). The test-control API and the
// checkpoint API itself are not driver calls a lock stops: they open an ungated Session.
class Session {
 public:
  enum Gate { kGated, kUngated };
  explicit Session(Gate gate = kGated)
      : state_(driver_state()), row_(gate == kGated ? state_.ledger.row() : nullptr) {
    if (row_ != nullptr && !enter_call(row_)) {
      row_ = nullptr;
      failed_ = true;
    }
    lock_ = std::unique_lock<std::mutex>(state_.mutex);
    make_progress(state_);
  }
  ~Session() {
    lock_.unlock();
    if (row_ != nullptr) leave_call(row_);
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  DriverState* operator->() { return &state_; }
  DriverState& operator*() { return state_; }
  CUresult require_init() const {
    if (failed_) return CUDA_ERROR_ILLEGAL_STATE;
    return state_.initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
  }
  // Waits for simulated work to end without holding the lock, so that the process's other
  // threads keep launching and querying meanwhile. deadline() (called with the lock held, after
  // make_progress) says when the work ends: kNever while it is held behind a wait, which is then
  // looked at again every kPollNs; once it is a time, the wait sleeps until then and returns.
  // Handles looked up before may be stale after: deadline() must look them up again.
  // hold_lock: the same, holding the lock throughout (the process's other threads' calls wait),
  // as the real driver appears to for a copy to pageable memory: it stages the copy itself,
  // inside the call, once the stream's work before it has ended (on the H100 a cudaMemcpyAsync
  // to pageable memory behind launches the hook held back left another thread blocked in the
  // driver).
  template <class Deadline>
  void wait_until(Deadline deadline, bool hold_lock = false) {
    for (;;) {
      const std::int64_t end = deadline();
      const std::int64_t now = monotonic_now();
      if (end <= now) return;
      if (!hold_lock) {
        lock_.unlock();
        // Not inside the driver while asleep: a lock need not wait for this thread, whose call
        // goes on once the process is unlocked again.
        if (row_ != nullptr) leave_call(row_);
      }
      sleep_until(end == kNever ? now + kPollNs : end);
      if (!hold_lock) {
        if (row_ != nullptr && !enter_call(row_)) row_ = nullptr;
        lock_.lock();
      }
      make_progress(state_);
      if (end != kNever) return;
    }
  }

 private:
  static std::int64_t monotonic_now();
  static void sleep_until(std::int64_t deadline_ns);
  DriverState& state_;
  ProcessTable::Row* row_;  // counted among its process's active calls; null when ungated
  bool failed_ = false;
  std::unique_lock<std::mutex> lock_;
};

}  // namespace fake_cuda
