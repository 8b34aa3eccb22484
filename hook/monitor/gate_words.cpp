// The gate words' storage and the two ways gates open in bulk (gate_words.h). Calls nothing
// beyond monitor_state.h: stores only.
#include "hook/monitor/gate_words.h"

namespace cuslice::activity {

void open_all(Slot& s) {
  if (g_state.gate_words != nullptr) gate_word(s).store(s.gates.load(std::memory_order_acquire), std::memory_order_release);
}

void retire_gates() {
  if (g_state.gate_state.load(std::memory_order_acquire) != kGateReady) return;
  for (Slot& s : g_state.slots) open_all(s);
  g_state.gate_state.store(kGateUnset, std::memory_order_release);
}

}  // namespace cuslice::activity
