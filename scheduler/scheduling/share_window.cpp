#include "scheduler/scheduling/share_window.h"

#include <algorithm>

namespace cuslice {

uint32_t ShareWindow::sample(Nanos now, uint64_t counter_ns) {
  if (count_ == kSamples) {
    first_ = (first_ + 1) % kSamples;
    --count_;
  }
  ring_[(first_ + count_) % kSamples] = {now, counter_ns};
  ++count_;
  // Drop samples older than the window, but keep one to measure from.
  while (count_ > 1) {
    const size_t next = (first_ + 1) % kSamples;
    if (now - ring_[next].at < kSpan) break;
    first_ = next;
    --count_;
  }
  const Sample& oldest = ring_[first_];
  const Nanos elapsed = now - oldest.at;
  if (count_ < 2 || elapsed.count() <= 0 || counter_ns < oldest.counter) return 0;
  const double share = static_cast<double>(counter_ns - oldest.counter) / static_cast<double>(elapsed.count());
  return static_cast<uint32_t>(std::min(share, 1.0) * 1'000'000.0 + 0.5);
}

}  // namespace cuslice
