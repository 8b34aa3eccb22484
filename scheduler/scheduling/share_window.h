// "Share achieved": how much of a GPU's time one tenant used lately, from its monotonic
// GPU-time counter sampled a few times a second.
//
// share = (counter now - counter at the oldest sample still inside the window)
//         / (time now - time of that sample), clamped to [0, 1].
// Until the window has filled (the daemon just started, or the tenant is new) the span is
// what has been sampled so far. GPU time can exceed wall time when one tenant runs several
// streams at once; the clamp keeps the figure a ratio.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace cuslice {

class ShareWindow {
 public:
  using Nanos = std::chrono::nanoseconds;
  // At most this many samples are kept; the daemon samples every kSpan / (kSamples - 1).
  static constexpr size_t kSamples = 11;

  static constexpr Nanos kSpan = std::chrono::seconds(5);

  // Forgets every sample (the counter was reset, or the tenant changed).
  void reset() { count_ = 0; }

  // Records `counter_ns` at `now` (non-decreasing) and returns the share over the window in
  // millionths (0 with a single sample).
  uint32_t sample(Nanos now, uint64_t counter_ns);

 private:
  struct Sample {
    Nanos at{0};
    uint64_t counter = 0;
  };
  std::array<Sample, kSamples> ring_{};
  size_t first_ = 0;  // oldest sample
  size_t count_ = 0;
};

}  // namespace cuslice
