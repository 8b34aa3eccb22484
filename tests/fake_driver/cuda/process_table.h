// The processes that use one simulated device: what each holds on it, and its checkpoint state
// (cuCheckpointProcess*: checkpoint.cpp), in one table every process can read and change.
//
// Why a shared table
//   The checkpoint API acts on *another* process (cuCheckpointProcessLock(pid)): the caller
//   must stop that process's driver calls and take its device memory away. Each process runs
//   its own copy of the fake, so the state both sides act on lives here, beside the devices'
//   timeline (device_timeline.h): in /dev/shm/<FAKE_CUDA_SHARED_DEVICE> when the device is
//   shared, in the process's own memory otherwise (then only the process itself is in it).
//   The device's memory is the sum of the rows: a process's allocation fails when the rows of
//   all live processes leave too little, as on one GPU.
//
// Why it survives a process killed at any instruction
//   - All-zero bytes are a valid, empty table (the shared object is zero-filled when made).
//   - Changes of several words (a charge checked against every row, a checkpoint moving a row's
//     memory) are made under `lock_owner`, a lock word holding the owner's pid: a waiter that
//     finds the owner dead takes the lock over. A dead owner only ever left its own row, or a
//     row it was moving, half-changed; every such change is ordered so that what it leaves is
//     meaningful (see checkpoint.cpp).
//   - A row whose process is dead (its pid gone, a zombie, or reused by a process that started
//     later) holds nothing: it is freed by whoever next sums the rows, as a GPU frees a dead
//     process's memory.
//   - A checkpoint operation records its caller (op_pid) while it runs; one whose caller died
//     is rolled back by the next caller that looks at the row (checkpoint.cpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tests/fake_driver/cuda/knobs.h"

namespace fake_cuda {

inline constexpr int kMaxProcessRows = 128;

struct ProcessTable {
  // A row's checkpoint state. The first four are CUprocessState's values; the others are an
  // operation in progress, reported as the state it started from.
  enum State : std::uint32_t {
    kRunning = 0,
    kLocked = 1,
    kCheckpointed = 2,
    kFailed = 3,
    kLocking = 4,        // RUNNING -> LOCKED: waiting for the process's calls to return
    kCheckpointing = 5,  // LOCKED -> CHECKPOINTED: waiting for its work, copying out
    kRestoring = 6,      // CHECKPOINTED -> LOCKED: memory taken back, copying in
  };
  // Row::flags, written by the process itself (under its driver lock) as its memory changes.
  static constexpr std::uint32_t kHasManaged = 1u << 0;  // live cuMemAllocManaged memory
  static constexpr std::uint32_t kHasIpc = 1u << 1;      // memory exported or imported by CUDA IPC
  // Written by checkpoint.cpp: a restore failed for want of memory, and the driver (580,
  // measured by NVIDIA's users) then fails every later restore of the process.
  static constexpr std::uint32_t kRestoreBroken = 1u << 2;

  struct alignas(64) Row {
    std::atomic<std::int32_t> pid;  // 0: free. Claimed and freed under the table lock.
    std::atomic<std::uint32_t> state;
    // /proc/<pid>/stat field 22: tells the process apart from a later one given the same pid.
    std::atomic<std::uint64_t> start_time;
    // Threads of the process inside a driver call that a lock must wait for (Session).
    std::atomic<std::int32_t> active_calls;
    std::atomic<std::int32_t> op_pid;       // caller of the operation in progress, else 0
    std::atomic<std::uint32_t> flags;
    std::atomic<std::int32_t> restore_tid;  // cuCheckpointProcessGetRestoreThreadId
    // CLOCK_MONOTONIC ns at which the process's submitted work ends; kNever (INT64_MAX) while
    // some of it is held behind a wait on a memory word. What a checkpoint waits for.
    std::atomic<std::int64_t> work_end_ns;
    std::atomic<std::uint64_t> held[kMaxDevices];          // bytes on each device
    std::atomic<std::uint64_t> checkpointed[kMaxDevices];  // bytes moved to host memory
  };

  std::atomic<std::int32_t> lock_owner;  // pid of the holder, 0 when free
  Row rows[kMaxProcessRows];
};

static_assert(std::is_standard_layout_v<ProcessTable>, "shared between processes");
static_assert(std::atomic<std::int32_t>::is_always_lock_free);

// The table lock (lock_owner). Never held across a wait for anything but the lock itself.
class TableLock {
 public:
  explicit TableLock(ProcessTable& table);
  ~TableLock();
  TableLock(const TableLock&) = delete;
  TableLock& operator=(const TableLock&) = delete;

 private:
  ProcessTable& table_;
};

// Whether the process that claimed a row is still the one running under its pid.
bool process_alive(std::int32_t pid, std::uint64_t start_time);
// This process's start time (0 if unreadable).
std::uint64_t own_start_time();

// Under the lock: the row of pid (whatever its state), or null. Dead processes' rows are freed
// on the way.
ProcessTable::Row* find_row(ProcessTable& table, std::int32_t pid);
// A fresh row for the calling process (any row it had before is dropped first); null when the
// table is full.
ProcessTable::Row* claim_row(ProcessTable& table);
// Gives the calling process's row back, with whatever it held.
void drop_row(ProcessTable& table, ProcessTable::Row* row);

// Bytes held on dev by every live process (frees the rows of dead ones). Under the lock.
std::uint64_t device_used(ProcessTable& table, int dev);
// The live processes holding memory on dev and what each holds, at most max, in table order;
// returns how many. Under the lock.
int device_holders(ProcessTable& table, int dev, std::int32_t* pids, std::uint64_t* bytes, int max);
// Adds bytes to row's charge on dev if every live process together then holds at most
// capacity; false, and nothing charged, otherwise. Takes the lock.
bool try_take(ProcessTable& table, ProcessTable::Row* row, int dev, std::uint64_t bytes,
              std::uint64_t capacity);
void give_back(ProcessTable::Row* row, int dev, std::uint64_t bytes);

// The gate of the process's driver calls (Session): enter waits while the row is locked (or
// checkpointed, restoring, ...) and counts the caller among the active calls; leave uncounts it.
// Returns false, counting nothing, when the process is in the FAILED state.
bool enter_call(ProcessTable::Row* row);
void leave_call(ProcessTable::Row* row);
// Wakes the threads waiting in enter_call after the row's state changed.
void wake_callers(ProcessTable::Row* row);

}  // namespace fake_cuda
