// The launch monitor's state (monitor_state.h says what each field is). Calls nothing.
#include "hook/monitor/monitor_state.h"

namespace cuslice::activity {

// Constant-initialised, all zero: in .bss, so it takes no room in the library's file.
constinit MonitorState g_state;

__attribute__((tls_model("initial-exec"))) constinit thread_local int t_record = 0;
__attribute__((tls_model("initial-exec"))) constinit thread_local bool t_record_tried = false;
__attribute__((tls_model("initial-exec"))) constinit thread_local uintptr_t t_last_key = 0;
__attribute__((tls_model("initial-exec"))) constinit thread_local Slot* t_last_slot = nullptr;

}  // namespace cuslice::activity
