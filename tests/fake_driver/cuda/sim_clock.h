// The clock of simulated execution: CLOCK_MONOTONIC in nanoseconds, as a plain integer so that it
// can live in shared memory and be compared between processes (every process of the host reads
// the same CLOCK_MONOTONIC). Real time, not virtual time: a kernel of 5 ms keeps whoever waits
// for it waiting 5 ms, so that a scheduler gating real processes sees real durations.
#pragma once

#include <time.h>

#include <cerrno>
#include <cstdint>

namespace fake_cuda {

// Nanoseconds on CLOCK_MONOTONIC. 0 is far in the past ("done long ago").
inline std::int64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return std::int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

// Returns once CLOCK_MONOTONIC reads at least deadline_ns (at once for a deadline passed).
// Signals do not cut the sleep short.
inline void sleep_until_ns(std::int64_t deadline_ns) {
  if (deadline_ns <= 0) return;
  const timespec deadline{static_cast<time_t>(deadline_ns / 1'000'000'000),
                          static_cast<long>(deadline_ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr) == EINTR) {
  }
}

}  // namespace fake_cuda
