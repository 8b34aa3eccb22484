// The stream slot table: which streams the process launched on, keyed by stream (or by
// context for a default stream), and the events the monitor records on each and retires as
// they complete.
//
// Launching threads call slot_of() and mark(); everything else is the monitor's, under
// g_state.lock. May call monitor_state, monitor_driver and gate_words.
#pragma once

#include <cstdint>

#include "hook/base/cuda_api.h"
#include "hook/monitor/monitor_state.h"

namespace cuslice::activity {

// The slot of `key`, added if `add` and new; nullptr when absent, or the table is full (the
// stream is then not tracked, and drain is judged without it).
Slot* find_or_add(uintptr_t key, bool add);
// The slot of the stream launched on, from a launching thread (nullptr: the table is full).
// The created stream the thread asked for last is found without searching the table.
Slot* slot_of(int device, CUstream stream);
// Marks the stream launched on, so that the monitor records after it (and so cannot take the
// device for drained while the launch is under way), and adds the launch's estimate to it.
void mark(int device, CUstream stream, uint32_t est);

// Records an event after the work queued on the slot's stream. Monitor thread, under
// g_state.lock, never while a capture is in progress. False: nothing recorded, try again later
// (the ring is full: its oldest record has not finished).
bool record(Slot& s, uintptr_t key);
// Drops the records that completed (raising the device's completed-launch count to what
// they cover); true while some record is outstanding.
bool retire(Slot& s);
// Raises the device's completed-launch count to `to` (records, marks and gates seen reached).
void raise_completed(int device, uint64_t to);
// Frees the slot (its stream or context is going): held back work on it runs, its events
// are destroyed.
void release_slot(Slot& s);

}  // namespace cuslice::activity
