// Kernel-time estimates (kernel_estimates.h). May call monitor_state and the client
// (report_gpu_time).
#include "hook/monitor/kernel_estimates.h"

#include <algorithm>

#include "hook/link/client.h"

namespace cuslice::activity {

int kernel_slot(uintptr_t key) {
  size_t i = static_cast<size_t>(key * 0x9E3779B97F4A7C15ull >> 52);  // 12 bits: kKernelSlots
  for (int probe = 0; probe < kKernelProbes; ++probe, ++i) {
    KernelTime& k = g_state.kernels[i % kKernelSlots];
    uintptr_t cur = k.key.load(std::memory_order_acquire);
    if (cur == key) return static_cast<int>(i % kKernelSlots);
    if (cur == 0 && (k.key.compare_exchange_strong(cur, key, std::memory_order_acq_rel) || cur == key))
      return static_cast<int>(i % kKernelSlots);
  }
  return -1;
}

// The launches completed since the last look together took from when the first could start
// (the previous ones complete, or its submission if later) to now, shared among them in
// proportion to their current estimates. Estimates that are right are a fixed point of this;
// a wrong one moves towards the truth whenever its kernel completes alone or beside kernels
// measured well. Completion is seen late, by up to a poll, so the previous ones are taken to
// have completed at the look before they were seen complete (`looked`): both ends err towards
// a longer time, and a kernel is overestimated by up to two polls, never under: an
// underestimated long kernel would let a second one queue behind it. Not while the token was
// elsewhere: the time is then partly another tenant's.
void learn(Device& dev, int device, int64_t now, int64_t looked, uint64_t completed) {
  if (completed <= dev.learnt) return;
  const uint64_t n = completed - dev.learnt;
  Launch* ring = g_state.ring[device];
  const auto mine = [&](uint64_t i) { return ring[i % kRing].seq.load(std::memory_order_acquire) == i + 1; };
  if (n <= kRing && !dev.disturbed && dev.learnt_at != 0 && mine(dev.learnt)) {
    const int64_t start = std::max(dev.learnt_at, ring[dev.learnt % kRing].at.load(std::memory_order_relaxed));
    const double took = static_cast<double>(now - start);
    // Shared by the estimates the launches were made with: fixed while the loop updates the
    // table (a kernel launched n times in the batch moves n times).
    const auto made_with = [&](uint64_t i) -> double {
      return mine(i) ? ring[i % kRing].est_ns.load(std::memory_order_relaxed) : dev.mean_ns.load(std::memory_order_relaxed);
    };
    double total = 0;
    for (uint64_t i = dev.learnt; i < completed; ++i) total += made_with(i);
    if (took > 0 && total > 0) {
      for (uint64_t i = dev.learnt; i < completed; ++i) {
        const uint32_t kernel = mine(i) ? ring[i % kRing].kernel.load(std::memory_order_relaxed) : 0;
        if (kernel == 0) continue;
        std::atomic<uint32_t>& ns = g_state.kernels[kernel - 1].ns;
        const double share = took * made_with(i) / total;
        const double old = ns.load(std::memory_order_relaxed);
        const double next = old == 0 ? share : old + (share - old) / 8;
        ns.store(static_cast<uint32_t>(std::clamp(next, 1.0, 4e9)), std::memory_order_relaxed);
      }
    }
  }
  dev.learnt = completed;
  dev.learnt_at = looked != 0 ? looked : now;
  dev.disturbed = false;
}

// A launch adds its estimate before it marks its entry, so an entry that is marked is
// counted. (One that is not is skipped: made while nothing was bounded, or, rarely, by threads
// that launched at once and swapped places; the drain squares the sums.)
void retire_estimates(Device& dev, int device, uint64_t completed) {
  if (completed - dev.retired > kRing) dev.retired = completed - kRing;
  int64_t sum = 0;
  for (uint64_t i = dev.retired; i < completed; ++i) {
    const Launch& l = g_state.ring[device][i % kRing];
    if (l.seq.load(std::memory_order_acquire) == i + 1) sum += l.est_ns.load(std::memory_order_relaxed);
  }
  dev.retired = completed;
  if (sum != 0) dev.retired_ns.fetch_add(sum, std::memory_order_release);
}

void account(Device& dev, int gpu, int64_t now, uint64_t completed) {
  const int64_t busy = now - dev.busy_since;
  client::report_gpu_time(gpu, static_cast<uint64_t>(busy));
  const uint64_t done = completed - dev.completed_accounted;
  dev.completed_accounted = completed;
  // Alone, with the records held off while launches kept coming (monitor.cpp), none is seen
  // complete until they stop: the time until then is theirs, so it adds up. Otherwise an
  // interval in which none completed counts for nothing: a launch held back behind a gate is
  // in flight but not running.
  const bool carry = dev.carry_unlearnt;
  dev.busy_unlearnt_ns = (carry ? dev.busy_unlearnt_ns : 0) + busy;
  if (done == 0) {
    if (!carry) dev.in_flight_ns = 0;
    return;
  }
  const int64_t in_flight = dev.in_flight_ns;
  const int64_t busy_all = dev.busy_unlearnt_ns;
  dev.in_flight_ns = dev.busy_unlearnt_ns = 0;
  dev.carry_unlearnt = false;
  constexpr double kDecay = 0.9;
  dev.busy_ns = dev.busy_ns * kDecay + static_cast<double>(in_flight > 0 ? in_flight : busy_all);
  dev.busy_launches = dev.busy_launches * kDecay + static_cast<double>(done);
  const double mean = dev.busy_ns / dev.busy_launches;
  dev.mean_ns.store(static_cast<uint32_t>(std::clamp(mean, 1.0, 4e9)), std::memory_order_relaxed);
}

}  // namespace cuslice::activity
