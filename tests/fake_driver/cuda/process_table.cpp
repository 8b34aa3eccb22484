#include "tests/fake_driver/cuda/process_table.h"

#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace fake_cuda {
namespace {

using Row = ProcessTable::Row;

// /proc/<pid>/stat: the state letter (field 3) and the start time (field 22). False when the
// process is gone.
bool read_stat(std::int32_t pid, char* state, std::uint64_t* start_time) {
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE* file = std::fopen(path, "re");
  if (file == nullptr) return false;
  char line[1024];
  const bool read = std::fgets(line, sizeof line, file) != nullptr;
  std::fclose(file);
  if (!read) return false;
  // Field 2 (comm) is in parentheses and may hold spaces and ')': count from the last ')'.
  const char* close = std::strrchr(line, ')');
  if (close == nullptr) return false;
  unsigned long long start = 0;
  if (std::sscanf(close + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                  state, &start) != 2) {
    return false;
  }
  *start_time = start;
  return true;
}

void free_row(Row& row) {
  for (int dev = 0; dev < kMaxDevices; ++dev) {
    row.held[dev].store(0);
    row.checkpointed[dev].store(0);
  }
  row.state.store(ProcessTable::kRunning);
  row.active_calls.store(0);
  row.op_pid.store(0);
  row.flags.store(0);
  row.restore_tid.store(0);
  row.work_end_ns.store(0);
  row.start_time.store(0);
  row.pid.store(0);  // last: the row is claimable only once clean
}

// A row whose process died holds nothing any more. Under the lock.
bool reap_if_dead(Row& row) {
  const std::int32_t pid = row.pid.load();
  if (pid == 0) return true;
  if (pid == getpid() || process_alive(pid, row.start_time.load())) return false;
  free_row(row);
  return true;
}

long futex(std::atomic<std::uint32_t>* word, int op, std::uint32_t value, const timespec* timeout) {
  // Not FUTEX_PRIVATE_FLAG: the word may be in memory shared with other processes.
  return syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

bool process_alive(std::int32_t pid, std::uint64_t start_time) {
  char state = 0;
  std::uint64_t started = 0;
  if (!read_stat(pid, &state, &started)) return false;
  // A zombie has released its GPU memory already (its files closed at exit).
  if (state == 'Z' || state == 'X') return false;
  return start_time == 0 || started == start_time;
}

std::uint64_t own_start_time() {
  char state = 0;
  std::uint64_t started = 0;
  return read_stat(getpid(), &state, &started) ? started : 0;
}

TableLock::TableLock(ProcessTable& table) : table_(table) {
  const std::int32_t self = getpid();
  for (unsigned spins = 0;; ++spins) {
    std::int32_t owner = 0;
    if (table_.lock_owner.compare_exchange_strong(owner, self)) return;
    // Held by a process that died holding it: take it over (only its own changes were cut short).
    if (owner != self && spins % 64 == 63 && !process_alive(owner, 0) &&
        table_.lock_owner.compare_exchange_strong(owner, self)) {
      return;
    }
    if (spins < 100) {
      sched_yield();
    } else {
      const timespec pause{0, 20'000};
      nanosleep(&pause, nullptr);
    }
  }
}

TableLock::~TableLock() { table_.lock_owner.store(0); }

Row* find_row(ProcessTable& table, std::int32_t pid) {
  if (pid <= 0) return nullptr;
  for (Row& row : table.rows) {
    if (row.pid.load() != pid) continue;
    if (reap_if_dead(row)) return nullptr;
    return &row;
  }
  return nullptr;
}

Row* claim_row(ProcessTable& table) {
  TableLock lock(table);
  const std::int32_t self = getpid();
  for (Row& row : table.rows) {
    if (row.pid.load() == self) free_row(row);
  }
  for (Row& row : table.rows) {
    if (row.pid.load() != 0 && !reap_if_dead(row)) continue;
    row.start_time.store(own_start_time());
    row.restore_tid.store(static_cast<std::int32_t>(syscall(SYS_gettid)));
    row.pid.store(self);
    return &row;
  }
  return nullptr;
}

void drop_row(ProcessTable& table, Row* row) {
  if (row == nullptr) return;
  TableLock lock(table);
  if (row->pid.load() == getpid()) free_row(*row);
}

std::uint64_t device_used(ProcessTable& table, int dev) {
  std::uint64_t used = 0;
  for (Row& row : table.rows) {
    if (row.pid.load() == 0 || reap_if_dead(row)) continue;
    used += row.held[dev].load();
  }
  return used;
}

int device_holders(ProcessTable& table, int dev, std::int32_t* pids, std::uint64_t* bytes, int max) {
  int n = 0;
  for (Row& row : table.rows) {
    if (n >= max) break;
    if (row.pid.load() == 0 || reap_if_dead(row)) continue;
    const std::uint64_t held = row.held[dev].load();
    if (held == 0) continue;
    pids[n] = row.pid.load();
    bytes[n++] = held;
  }
  return n;
}

bool try_take(ProcessTable& table, Row* row, int dev, std::uint64_t bytes, std::uint64_t capacity) {
  TableLock lock(table);
  const std::uint64_t used = device_used(table, dev);
  if (used > capacity || bytes > capacity - used) return false;
  row->held[dev].fetch_add(bytes);
  return true;
}

void give_back(Row* row, int dev, std::uint64_t bytes) {
  // Never below zero: a forked child that frees what its parent allocated gives back nothing.
  std::uint64_t held = row->held[dev].load();
  while (!row->held[dev].compare_exchange_weak(held, held > bytes ? held - bytes : 0)) {
  }
}

bool enter_call(Row* row) {
  for (;;) {
    // Counted first, state read second (both sequentially consistent): a locker sets the state
    // first and reads the count second, so either this call sees the lock and backs off, or the
    // locker sees this call and waits for it to leave.
    row->active_calls.fetch_add(1);
    const std::uint32_t state = row->state.load();
    if (state == ProcessTable::kRunning) return true;
    row->active_calls.fetch_sub(1);
    if (state == ProcessTable::kFailed) return false;
    // A bounded sleep: a wake-up is never needed for correctness, only for speed.
    const timespec timeout{0, 10'000'000};
    futex(&row->state, FUTEX_WAIT, state, &timeout);
  }
}

void leave_call(Row* row) { row->active_calls.fetch_sub(1); }

void wake_callers(Row* row) { futex(&row->state, FUTEX_WAKE, INT32_MAX, nullptr); }

}  // namespace fake_cuda
