// The hook's own threads (the launch monitor, its watchdog, the mover): started detached,
// named, with default attributes otherwise. May call libc only.
#pragma once

namespace cuslice {

// Starts `body` on a detached thread named `name` (at most 15 characters). False: no thread
// (the caller says what that means for the process).
bool start_detached_thread(void* (*body)(void*), const char* name) noexcept;

}  // namespace cuslice
