// The fast suspension's thread (docs/design/preemption.md, "Two ways to suspend"): takes the
// scheduler's orders from the process's slot and carries them out in the process. Move out:
// hold the process's work (work_hold.h), drain what it queued, then move as much of its memory
// as ordered off the GPU (movable_memory.h). Move back: everything back at the same addresses,
// then let the work go on. Between orders it prepares the pinned host memory the daemon allows
// (host_pool.h) and reports what it can move. When the scheduler goes away while the process
// is held, it moves everything back on its own and lets the process go on, so that a dead
// scheduler never leaves a process stopped or without its memory.
//
// Started by movable_memory at the process's first movable allocation; never started in a
// process that moves nothing. May call the client, the driver table and the files it names.
#pragma once

namespace cuslice::mover {

void start() noexcept;
void after_fork_child() noexcept;

}  // namespace cuslice::mover
