// The definitions of the launch monitor's shared state (monitor_state.h says what each is).
// Calls nothing.
#include "hook/monitor/monitor_state.h"

namespace cuslice::activity {

std::atomic<bool> g_others{false};
std::atomic<bool> g_higher{false};
std::atomic<bool> g_sliced{false};
std::atomic<bool> g_capped{false};

Slot g_slots[kSlots];
Device g_devices[kMaxDevices];
KernelTime g_kernels[kKernelSlots];
Launch g_ring[kMaxDevices][kRing];
std::atomic<uint32_t> g_wake{0};
std::atomic<int> g_captures{0};
std::atomic<uintptr_t> g_capture_origins[64];
std::atomic<bool> g_running{false};
std::atomic<bool> g_stop{false};
std::mutex g_monitor;
int64_t g_max_queued_ns = 500'000;
int64_t g_preempt_queued_ns = 250'000;
int64_t g_park_cap_ns = 20'000'000;
Counts g_counts;
std::atomic<int64_t> g_pass_began{0};

}  // namespace cuslice::activity
