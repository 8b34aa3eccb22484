// The gate words: three words per stream slot in host memory the GPU reads and writes, through
// which launches are held back on the GPU and the GPU says how far it got (parking.cpp puts
// the gates and marks; the monitor and the watchdog open gates and read the words).
//
// Per slot: the gate the GPU may pass (written by the monitor), the last gate the GPU reached
// (written by the GPU just before it waits there: all work before it is done), and the last
// mark the GPU reached (written by the GPU after the work before it). Gates and marks are
// numbered 1, 2, ... and compared cyclically, as the GPU compares.
//
// The memory is the hook's own and never freed, pinned (registered) in the context current
// at set-up: pinned memory goes with the context it was pinned in, and an application may
// destroy that context (or reset a primary one: cudaDeviceReset) and go on, or release it
// before exit. The words must stay readable by the monitor and the launching threads whatever
// the application does; only the registration goes, and is made again in the next context that
// parks (kGateUnset).
//
// May call monitor_state.h only: opening a gate is a store, never a driver call (the watchdog
// relies on that).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "hook/base/cuda_api.h"
#include "hook/monitor/monitor_state.h"

namespace cuslice::activity {

inline constexpr size_t kGateWordsBytes = sizeof(std::atomic<uint32_t>) * kSlots * 3;

inline std::atomic<uint32_t>& gate_word(const Slot& s) { return g_state.gate_words[&s - g_state.slots]; }
inline std::atomic<uint32_t>& reached_word(const Slot& s) { return g_state.gate_words[kSlots + (&s - g_state.slots)]; }
inline std::atomic<uint32_t>& mark_word(const Slot& s) { return g_state.gate_words[2 * kSlots + (&s - g_state.slots)]; }
// A word's address as the GPU sees it, for the stream memory operations.
inline CUdeviceptr gpu_address(const std::atomic<uint32_t>& word) {
  return g_state.gate_dptr + static_cast<CUdeviceptr>(&word - g_state.gate_words) * sizeof(uint32_t);
}
// Gate k is still closed: the word has not reached it (cyclic, as the GPU compares).
inline bool gate_closed(uint32_t word, uint32_t k) { return static_cast<int32_t>(word - k) < 0; }

// Opens every gate on the slot's stream.
void open_all(Slot& s);
// The context the gate words are registered in is about to go (under g_state.lock): work held
// back anywhere runs, and the next launch to park registers them again in its own context.
void retire_gates();

}  // namespace cuslice::activity
