// The gate words' storage and the two ways gates open in bulk (gate_words.h). Calls nothing
// beyond monitor_state.h: stores only.
#include "hook/monitor/gate_words.h"

namespace cuslice::activity {

std::atomic<int> g_gate_state{kGateUnset};
std::atomic<uint32_t>* g_gate_words = nullptr;
CUdeviceptr g_gate_dptr = 0;
CUcontext g_gate_ctx = nullptr;
int g_gate_device = -1;

void open_all(Slot& s) {
  if (g_gate_words != nullptr) gate_word(s).store(s.gates.load(std::memory_order_acquire), std::memory_order_release);
}

void retire_gates() {
  if (g_gate_state.load(std::memory_order_acquire) != kGateReady) return;
  for (Slot& s : g_slots) open_all(s);
  g_gate_state.store(kGateUnset, std::memory_order_release);
}

}  // namespace cuslice::activity
