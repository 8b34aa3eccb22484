// The daemon's ownership of the shared segment: created fresh at start, mode 0644 (a segment
// left by a crashed daemon is replaced, never reused: its counters describe processes that
// re-register anyway), unlinked at exit. Hooks that still map an old segment keep a valid mapping; they
// notice the daemon is gone through the socket and the segment's state.
//
// The daemon holds a record lock on its segment for its whole life (os_fds.h,
// lock_whole_file): a second daemon given the same name finds it held and refuses to start,
// naming the holder, instead of unlinking a live daemon's segment; after a crash or SIGKILL
// the lock is gone with the process and the leftover segment is replaced at once.
#pragma once

#include <string>

#include "protocol/shm_protocol.h"

namespace cuslice {

class SharedSegment {
 public:
  // Creates and initialises the segment (state kStarting); throws std::system_error, or
  // std::runtime_error when another daemon holds a segment of that name.
  SharedSegment(std::string name, uint64_t generation);
  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  shm::Segment& operator*() const { return *segment_; }
  shm::Segment* operator->() const { return segment_; }
  const std::string& name() const { return name_; }
  // A read-only descriptor of the segment, handed to each registered process with its reply
  // (SCM_RIGHTS): a hook maps the segment of the daemon it talks to, even where the name shows
  // an older one (a container's bind mount of the file of a scheduler since restarted).
  int readonly_fd() const { return readonly_fd_; }

 private:
  std::string name_;
  int fd_ = -1;  // kept open: closing it would drop the lock
  // Opened once and kept for the daemon's life: closing a descriptor of the locked file would
  // drop the lock too.
  int readonly_fd_ = -1;
  shm::Segment* segment_ = nullptr;
};

}  // namespace cuslice
