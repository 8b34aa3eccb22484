// The monotonic clock as every component reads it: nanoseconds of CLOCK_MONOTONIC as one
// signed 64-bit count. The hook, its client and the daemon take their deadlines, waits and
// intervals from here. Header-only, allocation-free and exception-free; clock_gettime is
// answered by the vDSO, without a system call, so the hook's hot paths may call it.
#pragma once

#include <time.h>

#include <cstdint>

namespace cuslice {

inline int64_t now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// The same clock at the last scheduler tick (a few milliseconds behind): cheaper than
// now_ns(), for intervals far longer than a tick.
inline int64_t coarse_now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace cuslice
