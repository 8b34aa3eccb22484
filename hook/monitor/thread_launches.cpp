// Launch records, one per launching thread, and the monitor's folding of them into the
// devices' counts (thread_launches.h). May call monitor_state.
#include "hook/monitor/thread_launches.h"

#include "hook/base/fork_child.h"

namespace cuslice::activity {
namespace {

// Gives the thread's record back when the thread exits (its counts stay).
struct GiveBack {
  ~GiveBack() {
    if (t_record != 0) g_state.records[t_record - 1].owner.store(0, std::memory_order_release);
    t_record = 0;
  }
};

uint64_t sum(std::atomic<uint64_t> LaunchRecord::Counts::*count, int device, int used) {
  uint64_t total = 0;
  for (int i = 0; i < used; ++i) total += (g_state.records[i].on[device].*count).load(std::memory_order_acquire);
  return total;
}

}  // namespace

int claim_record() {
  if (t_record != 0 || t_record_tried) return t_record;
  // Once per thread: a thread that found none free counts on the device from then on.
  t_record_tried = true;
  for (int i = 0; i < kLaunchRecords; ++i) {
    uint32_t free = 0;
    if (!g_state.records[i].owner.compare_exchange_strong(free, 1, std::memory_order_acq_rel)) continue;
    int used = g_state.records_used.load(std::memory_order_relaxed);
    while (used < i + 1 && !g_state.records_used.compare_exchange_weak(used, i + 1, std::memory_order_release)) {
    }
    static thread_local GiveBack give_back;  // constructed here, so destroyed at thread exit
    (void)give_back;
    t_record = i + 1;
    return t_record;
  }
  return 0;
}

void fold(int device) {
  if (device >= kRecordDevices) return;
  const int used = g_state.records_used.load(std::memory_order_acquire);
  if (used == 0) return;
  // Forwarded first: each record's begun, read after, is at least its done read here.
  const uint64_t done = sum(&LaunchRecord::Counts::done, device, used);
  const uint64_t begun = sum(&LaunchRecord::Counts::begun, device, used);
  Device& dev = g_state.devices[device];
  const uint64_t new_begun = begun - g_state.folded_begun[device].load(std::memory_order_relaxed);
  const uint64_t new_done = done - g_state.folded_done[device].load(std::memory_order_relaxed);
  if (new_begun != 0) dev.tickets.fetch_add(new_begun, std::memory_order_seq_cst);
  if (new_done != 0) dev.launched.fetch_add(new_done, std::memory_order_seq_cst);
  g_state.folded_begun[device].store(begun, std::memory_order_relaxed);
  g_state.folded_done[device].store(done, std::memory_order_relaxed);
}

void fold_begun(int device) {
  if (device >= kRecordDevices) return;
  const int used = g_state.records_used.load(std::memory_order_acquire);
  if (used == 0) return;
  const uint64_t begun = sum(&LaunchRecord::Counts::begun, device, used);
  const uint64_t new_begun = begun - g_state.folded_begun[device].load(std::memory_order_relaxed);
  if (new_begun == 0) return;
  g_state.devices[device].tickets.fetch_add(new_begun, std::memory_order_seq_cst);
  g_state.folded_begun[device].store(begun, std::memory_order_relaxed);
}

uint64_t unfolded_done(int device) {
  if (device >= kRecordDevices) return 0;
  const int used = g_state.records_used.load(std::memory_order_acquire);
  return sum(&LaunchRecord::Counts::done, device, used) - g_state.folded_done[device].load(std::memory_order_relaxed);
}

void reset_records_in_child() {
  int used = 0;
  for (int i = 0; i < kLaunchRecords; ++i) {
    LaunchRecord& r = g_state.records[i];
    const bool mine = i + 1 == t_record;
    renew_in_child(r);
    if (mine) {
      r.owner.store(1, std::memory_order_relaxed);
      used = i + 1;
    }
  }
  g_state.records_used.store(used, std::memory_order_relaxed);
  for (auto& f : g_state.folded_begun) f.store(0, std::memory_order_relaxed);
  for (auto& f : g_state.folded_done) f.store(0, std::memory_order_relaxed);
}

}  // namespace cuslice::activity
