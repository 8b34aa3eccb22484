// The checkpoint API (cuCheckpointProcess*): one process suspends another's use of the device.
//
// The target is a row of the process table (process_table.h); the target's own driver calls
// honour its state through their Session's gate. What each operation does here:
//   Lock        RUNNING -> LOCKED once the target's calls in progress have returned (new ones
//               wait at the gate); with a timeout that passes, back to RUNNING and
//               CUDA_ERROR_NOT_READY.
//   Checkpoint  LOCKED -> CHECKPOINTED: waits for the target's submitted work to end, takes
//               FAKE_CUDA_CHECKPOINT_MS_PER_GIB per GiB, then moves its memory off the device
//               (the row's held bytes become checkpointed bytes). Refused with
//               CUDA_ERROR_NOT_SUPPORTED, the target left LOCKED (or FAILED: the driver
//               documents that it "does not attempt to keep the process in a good state" after
//               such an error), when the target holds what the driver documents it cannot
//               checkpoint (FAKE_CUDA_CHECKPOINT_REFUSE).
//   Restore     CHECKPOINTED -> LOCKED: takes the memory back if the device has room, else
//               CUDA_ERROR_OUT_OF_MEMORY, and every later restore of that process fails with
//               CUDA_ERROR_OPERATING_SYSTEM (what users of driver 580 report: a restore that
//               ran out of memory leaves the process stuck until it is killed).
//   Unlock      LOCKED -> RUNNING, and the target's waiting calls go on.
// Any other state: CUDA_ERROR_ILLEGAL_STATE. A pid with no row (not a process of this device,
// or dead): CUDA_ERROR_INVALID_VALUE. The caller must have called cuInit. No GPU migration
// (restore arguments naming GPU pairs: CUDA_ERROR_NOT_SUPPORTED).
//
// A caller killed during an operation leaves the row in a transitional state naming it
// (op_pid); the next operation or query on the row undoes it (Lock, Checkpoint: back to the
// state they started from, nothing had moved; Restore: the memory it took is given back).
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "tests/fake_driver/cuda/driver_state.h"
#include "tests/fake_driver/cuda/sim_clock.h"

using namespace fake_cuda;

namespace {

using Row = ProcessTable::Row;

constexpr std::int64_t kMsNs = 1'000'000;

// What an operation needs of the calling process, read under its lock, which is then let go:
// an operation may take seconds and the caller's other threads go on meanwhile.
struct Caller {
  Knobs knobs;
  ProcessTable* table = nullptr;
  int device_count = 0;
  std::size_t capacity = 0;  // bytes of each device (every process sharing it has the same)

  CUresult open() {
    Session s(Session::kUngated);
    if (CUresult rc = s.require_init()) return rc;
    knobs = s->knobs;
    table = s->ledger.table();
    device_count = s->ledger.device_count();
    capacity = s->ledger.total(0);
    return table != nullptr ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
  }

  bool fails(unsigned failure) const { return (knobs.checkpoint_failures & failure) != 0; }

  // How long moving bytes takes.
  std::int64_t copy_ns(std::uint64_t bytes) const {
    return static_cast<std::int64_t>(static_cast<double>(bytes) / static_cast<double>(std::size_t{1} << 30) *
                                     static_cast<double>(knobs.checkpoint_ms_per_gib) * kMsNs);
  }
};

// A target found under the table lock. The row may be freed (its process died) and even claimed
// again once the lock is let go, so whoever uses it later checks still_ours() under the lock.
struct Target {
  Row* row = nullptr;
  std::int32_t pid = 0;
  std::uint64_t start_time = 0;
  // Under the lock: whether the row is still this target's and its process alive (a dead one's
  // row is freed on the way).
  bool still_ours(ProcessTable& table) const {
    return find_row(table, pid) == row && row->start_time.load() == start_time;
  }
};

bool all_zero(const void* bytes, std::size_t size) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  return std::all_of(p, p + size, [](unsigned char b) { return b == 0; });
}

std::uint64_t sum(const std::atomic<std::uint64_t> (&bytes)[kMaxDevices]) {
  std::uint64_t total = 0;
  for (const auto& b : bytes) total += b.load();
  return total;
}

// Under the lock: undoes an operation whose caller died.
void recover(Row& row) {
  const std::int32_t op = row.op_pid.load();
  if (op == 0 || op == getpid() || process_alive(op, 0)) return;
  switch (row.state.load()) {
    case ProcessTable::kLocking: row.state.store(ProcessTable::kRunning); break;
    case ProcessTable::kCheckpointing: row.state.store(ProcessTable::kLocked); break;
    case ProcessTable::kRestoring:
      for (int dev = 0; dev < kMaxDevices; ++dev) {
        const std::uint64_t taken = row.checkpointed[dev].load();
        const std::uint64_t held = row.held[dev].load();
        row.held[dev].store(held > taken ? held - taken : 0);
      }
      row.state.store(ProcessTable::kCheckpointed);
      break;
    default: break;
  }
  row.op_pid.store(0);
  wake_callers(&row);
}

// Under the lock: the target of pid, with any dead caller's operation undone.
CUresult find_target(ProcessTable& table, int pid, Target* target) {
  Row* row = find_row(table, pid);
  if (row == nullptr) return CUDA_ERROR_INVALID_VALUE;
  recover(*row);
  *target = Target{row, pid, row->start_time.load()};
  return CUDA_SUCCESS;
}

// Moves the target from `from` to the transitional `to` under the lock, naming this process as
// the one in charge.
CUresult begin(const Target& target, std::uint32_t from, std::uint32_t to) {
  std::uint32_t expected = from;
  if (!target.row->state.compare_exchange_strong(expected, to)) return CUDA_ERROR_ILLEGAL_STATE;
  target.row->op_pid.store(getpid());
  return CUDA_SUCCESS;
}

void finish(const Target& target, std::uint32_t state) {
  target.row->state.store(state);
  target.row->op_pid.store(0);
  wake_callers(target.row);
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuCheckpointProcessGetState(int pid, CUprocessState* state) {
  Caller caller;
  if (CUresult rc = caller.open()) return rc;
  if (state == nullptr) return CUDA_ERROR_INVALID_VALUE;
  TableLock lock(*caller.table);
  Target target;
  if (CUresult rc = find_target(*caller.table, pid, &target)) return rc;
  switch (target.row->state.load()) {
    case ProcessTable::kRunning:
    case ProcessTable::kLocking: *state = CU_PROCESS_STATE_RUNNING; break;
    case ProcessTable::kLocked:
    case ProcessTable::kCheckpointing: *state = CU_PROCESS_STATE_LOCKED; break;
    case ProcessTable::kCheckpointed:
    case ProcessTable::kRestoring: *state = CU_PROCESS_STATE_CHECKPOINTED; break;
    default: *state = CU_PROCESS_STATE_FAILED; break;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCheckpointProcessGetRestoreThreadId(int pid, int* tid) {
  Caller caller;
  if (CUresult rc = caller.open()) return rc;
  if (tid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  TableLock lock(*caller.table);
  Target target;
  if (CUresult rc = find_target(*caller.table, pid, &target)) return rc;
  *tid = target.row->restore_tid.load();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCheckpointProcessLock(int pid, CUcheckpointLockArgs* args) {
  Caller caller;
  if (CUresult rc = caller.open()) return rc;
  if (args != nullptr && (args->reserved0 != 0 || !all_zero(args->reserved1, sizeof args->reserved1))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const unsigned timeout_ms = args != nullptr ? args->timeoutMs : 0;
  Target target;
  {
    TableLock lock(*caller.table);
    if (CUresult rc = find_target(*caller.table, pid, &target)) return rc;
    if (caller.fails(Knobs::kFailLock)) return CUDA_ERROR_OPERATING_SYSTEM;
    if (CUresult rc = begin(target, ProcessTable::kRunning, ProcessTable::kLocking)) return rc;
  }
  // New calls now wait at the gate; the ones in progress are waited for.
  const std::int64_t deadline = timeout_ms > 0 ? monotonic_ns() + timeout_ms * kMsNs : kNever;
  for (unsigned polls = 0; target.row->active_calls.load() != 0; ++polls) {
    const bool late = monotonic_ns() >= deadline;
    const bool dead = polls % 1000 == 999 && !process_alive(target.pid, target.start_time);
    if (late || dead) {
      TableLock lock(*caller.table);
      if (!target.still_ours(*caller.table)) return CUDA_ERROR_INVALID_VALUE;
      finish(target, ProcessTable::kRunning);
      return CUDA_ERROR_NOT_READY;
    }
    sleep_until_ns(monotonic_ns() + 50'000);
  }
  TableLock lock(*caller.table);
  if (!target.still_ours(*caller.table)) return CUDA_ERROR_INVALID_VALUE;
  finish(target, ProcessTable::kLocked);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs* args) {
  Caller caller;
  if (CUresult rc = caller.open()) return rc;
  if (args != nullptr && !all_zero(args, sizeof *args)) return CUDA_ERROR_INVALID_VALUE;
  Target target;
  std::uint64_t bytes = 0;
  {
    TableLock lock(*caller.table);
    if (CUresult rc = find_target(*caller.table, pid, &target)) return rc;
    if (target.row->state.load() != ProcessTable::kLocked) return CUDA_ERROR_ILLEGAL_STATE;
    if (caller.fails(Knobs::kFailCheckpoint)) return CUDA_ERROR_OPERATING_SYSTEM;
    const std::uint32_t flags = target.row->flags.load();
    if ((caller.knobs.checkpoint_refuses_managed && (flags & ProcessTable::kHasManaged)) ||
        (caller.knobs.checkpoint_refuses_ipc && (flags & ProcessTable::kHasIpc))) {
      if (caller.knobs.checkpoint_refusal_fails) {
        target.row->state.store(ProcessTable::kFailed);
        wake_callers(target.row);
      }
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (CUresult rc = begin(target, ProcessTable::kLocked, ProcessTable::kCheckpointing)) return rc;
    bytes = sum(target.row->held);
  }
  // The work already submitted completes first (it may be held behind a wait on a memory word
  // that only the target's other threads will write: then this waits as long).
  for (;;) {
    const std::int64_t end = target.row->work_end_ns.load();
    const std::int64_t now = monotonic_ns();
    if (end <= now) break;
    if (!process_alive(target.pid, target.start_time)) break;  // settled below
    sleep_until_ns(std::min(end, now + kMsNs));
  }
  sleep_until_ns(monotonic_ns() + caller.copy_ns(bytes));
  TableLock lock(*caller.table);
  if (!target.still_ours(*caller.table)) return CUDA_ERROR_INVALID_VALUE;
  if (caller.fails(Knobs::kFailCheckpointFatal)) {
    finish(target, ProcessTable::kFailed);
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  for (int dev = 0; dev < kMaxDevices; ++dev) {
    target.row->checkpointed[dev].fetch_add(target.row->held[dev].exchange(0));
  }
  finish(target, ProcessTable::kCheckpointed);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs* args) {
  Caller caller;
  if (CUresult rc = caller.open()) return rc;
  if (args != nullptr) {
    if (!all_zero(args->reserved, sizeof args->reserved) || args->reserved1 != 0) return CUDA_ERROR_INVALID_VALUE;
    if (args->gpuPairs != nullptr || args->gpuPairsCount != 0) return CUDA_ERROR_NOT_SUPPORTED;
  }
  Target target;
  std::uint64_t bytes = 0;
  {
    TableLock lock(*caller.table);
    if (CUresult rc = find_target(*caller.table, pid, &target)) return rc;
    Row& row = *target.row;
    if (row.state.load() != ProcessTable::kCheckpointed) return CUDA_ERROR_ILLEGAL_STATE;
    if (row.flags.load() & ProcessTable::kRestoreBroken) return CUDA_ERROR_OPERATING_SYSTEM;
    if (caller.fails(Knobs::kFailRestore)) return CUDA_ERROR_OPERATING_SYSTEM;
    for (int dev = 0; dev < caller.device_count; ++dev) {
      const std::uint64_t used = device_used(*caller.table, dev);
      const std::uint64_t need = row.checkpointed[dev].load();
      if (used > caller.capacity || need > caller.capacity - used) {
        row.flags.fetch_or(ProcessTable::kRestoreBroken);
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
    }
    if (CUresult rc = begin(target, ProcessTable::kCheckpointed, ProcessTable::kRestoring)) return rc;
    for (int dev = 0; dev < kMaxDevices; ++dev) row.held[dev].fetch_add(row.checkpointed[dev].load());
    bytes = sum(row.checkpointed);
  }
  sleep_until_ns(monotonic_ns() + caller.copy_ns(bytes));
  TableLock lock(*caller.table);
  if (!target.still_ours(*caller.table)) return CUDA_ERROR_INVALID_VALUE;
  if (caller.fails(Knobs::kFailRestoreFatal)) {
    finish(target, ProcessTable::kFailed);
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  for (auto& checkpointed : target.row->checkpointed) checkpointed.store(0);
  finish(target, ProcessTable::kLocked);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs* args) {
  Caller caller;
  if (CUresult rc = caller.open()) return rc;
  if (args != nullptr && !all_zero(args, sizeof *args)) return CUDA_ERROR_INVALID_VALUE;
  TableLock lock(*caller.table);
  Target target;
  if (CUresult rc = find_target(*caller.table, pid, &target)) return rc;
  if (target.row->state.load() != ProcessTable::kLocked) return CUDA_ERROR_ILLEGAL_STATE;
  if (caller.fails(Knobs::kFailUnlock)) return CUDA_ERROR_OPERATING_SYSTEM;
  finish(target, ProcessTable::kRunning);
  return CUDA_SUCCESS;
}

}  // extern "C"
