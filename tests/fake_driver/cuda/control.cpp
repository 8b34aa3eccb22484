// The test-control API (fake_cuda_control.h).
#include <cstring>

#include "tests/fake_driver/cuda/device_identity.h"
#include "tests/fake_driver/cuda/driver_state.h"
#include "tests/fake_driver/fake_cuda_control.h"

using namespace fake_cuda;

namespace {

// What the row of pid holds on dev, by one of its per-device counters.
template <class Counter>
size_t process_bytes(int pid, int dev, Counter counter) {
  Session s(Session::kUngated);
  if (!s->ledger.valid(dev) || s->ledger.table() == nullptr) return 0;
  TableLock lock(*s->ledger.table());
  const ProcessTable::Row* row = find_row(*s->ledger.table(), pid);
  return row != nullptr ? (row->*counter)[dev].load() : 0;
}

}  // namespace

extern "C" {

int fake_cuda_device_count(void) {
  Session s(Session::kUngated);
  return s->ledger.device_count();
}

size_t fake_cuda_device_total(int dev) {
  Session s(Session::kUngated);
  return s->ledger.valid(dev) ? s->ledger.total(dev) : 0;
}

size_t fake_cuda_device_used(int dev) {
  Session s(Session::kUngated);
  return s->ledger.valid(dev) ? s->ledger.used(dev) : 0;
}

size_t fake_cuda_device_used_by(int dev, fake_cuda_charge charge) {
  Session s(Session::kUngated);
  if (!s->ledger.valid(dev) || charge < 0 || charge >= FAKE_CUDA_CHARGE_COUNT) return 0;
  return s->ledger.used_by(dev, charge);
}

size_t fake_cuda_device_used_all(int dev) {
  Session s(Session::kUngated);
  return s->ledger.valid(dev) ? s->ledger.device_used(dev) : 0;
}


size_t fake_cuda_process_used(int pid, int dev) {
  return process_bytes(pid, dev, &ProcessTable::Row::held);
}

int fake_cuda_device_processes(int dev, int* pids, size_t* bytes, int max) {
  Session s(Session::kUngated);
  if (!s->ledger.valid(dev) || s->ledger.table() == nullptr || pids == nullptr || bytes == nullptr || max <= 0)
    return 0;
  TableLock lock(*s->ledger.table());
  std::int32_t p[kMaxProcessRows];
  std::uint64_t b[kMaxProcessRows];
  const int n = device_holders(*s->ledger.table(), dev, p, b, max < kMaxProcessRows ? max : kMaxProcessRows);
  for (int i = 0; i < n; ++i) {
    pids[i] = p[i];
    bytes[i] = b[i];
  }
  return n;
}

size_t fake_cuda_process_checkpointed(int pid, int dev) {
  return process_bytes(pid, dev, &ProcessTable::Row::checkpointed);
}

int fake_cuda_process_active_calls(int pid) {
  Session s(Session::kUngated);
  if (s->ledger.table() == nullptr) return 0;
  TableLock lock(*s->ledger.table());
  const ProcessTable::Row* row = find_row(*s->ledger.table(), pid);
  return row != nullptr ? row->active_calls.load() : 0;
}

int fake_cuda_process_operation(int pid) {
  Session s(Session::kUngated);
  if (s->ledger.table() == nullptr) return 0;
  TableLock lock(*s->ledger.table());
  const ProcessTable::Row* row = find_row(*s->ledger.table(), pid);
  return row != nullptr ? row->op_pid.load() : 0;
}

void fake_cuda_device_uuid(int dev, unsigned char out[16]) {
  Session s(Session::kUngated);
  if (s->ledger.valid(dev)) device_uuid(dev, out);
}

void fake_cuda_device_name(int dev, char* name, size_t len) {
  Session s(Session::kUngated);
  if (!s->ledger.valid(dev) || name == nullptr || len == 0) return;
  std::strncpy(name, kDeviceName, len - 1);
  name[len - 1] = '\0';
}

int fake_cuda_proc_address_calls(void) {
  Session s(Session::kUngated);
  return s->proc_address_calls;
}

unsigned long long fake_cuda_launch_count(void) {
  Session s(Session::kUngated);
  return s->launches;
}

unsigned long long fake_cuda_faults(void) {
  Session s(Session::kUngated);
  return s->faults;
}

unsigned long long fake_cuda_busy_ns(void) {
  Session s(Session::kUngated);
  return s->busy_ns;
}

unsigned long long fake_cuda_device_busy_ns(int dev) {
  Session s(Session::kUngated);
  return s->ledger.valid(dev) ? s->timeline.busy_ns(dev) : 0;
}

unsigned long long fake_cuda_device_kernels(int dev) {
  Session s(Session::kUngated);
  return s->ledger.valid(dev) ? s->timeline.kernels(dev) : 0;
}

long long fake_cuda_device_free_at_ns(int dev) {
  Session s(Session::kUngated);
  return s->ledger.valid(dev) ? s->timeline.free_at(dev) : 0;
}

void fake_cuda_reset(void) {
  Session s(Session::kUngated);
  s->reset();
}

}  // extern "C"
