// Futex calls on words in shared memory, for waiting across processes.
//
// Deliberately without FUTEX_PRIVATE_FLAG: a private futex is keyed by the virtual address
// in one process, so a wake from the daemon would never reach a hook that maps the segment
// elsewhere. No allocation, no errno left changed, safe on hot-adjacent paths.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <ctime>

namespace cuslice {

// Sleeps while *word == expected, at most timeout_ns. Returns on a wake, on timeout, on a
// signal, or at once when *word already differs; callers re-check their condition anyway.
// The kernel only reads the word, so it may lie in a read-only mapping (the hooks' view of
// the segment).
inline void futex_wait(const std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns) {
  const int saved = errno;
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000), static_cast<long>(timeout_ns % 1000000000)};
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
  errno = saved;
}

// Wakes every process sleeping on `word`.
inline void futex_wake_all(std::atomic<uint32_t>* word) {
  const int saved = errno;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  errno = saved;
}

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

}  // namespace cuslice
