// The launch monitor thread (see activity.h for what it does): its loop and its pass over the
// tracked streams. Started by activity::start().
//
// May call every monitor file below it (monitor_state, monitor_driver, gate_words,
// stream_slots, kernel_estimates, queue_bound, parking), scheduler_link (gpu), the client and
// log; nothing above (activity.cpp, the hooks).
#pragma once

namespace cuslice::activity {

// The monitor thread's body (pthread_create).
void* monitor_main(void*);

}  // namespace cuslice::activity
