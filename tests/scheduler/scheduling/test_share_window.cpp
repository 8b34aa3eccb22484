// ShareWindow: the "share achieved" each tenant shows in `cuslice status` and the metrics.
#include "scheduler/scheduling/share_window.h"

#include <gtest/gtest.h>

namespace cuslice {
namespace {

using std::chrono::milliseconds;
constexpr uint64_t kMs = 1'000'000;

TEST(ShareWindowTest, OneSampleSaysNothing) {
  ShareWindow w;
  EXPECT_EQ(w.sample(milliseconds(1000), 500 * kMs), 0u);
}

TEST(ShareWindowTest, ShareIsGpuTimeOverElapsedTime) {
  ShareWindow w;
  w.sample(milliseconds(0), 0);
  EXPECT_EQ(w.sample(milliseconds(1000), 250 * kMs), 250'000u);
}

TEST(ShareWindowTest, OldSamplesLeaveTheWindow) {
  ShareWindow w;
  // Busy for the first 5 s, idle afterwards: once the busy part has left the window the
  // share drops to zero.
  uint64_t counter = 0;
  for (int t = 0; t <= 5000; t += 500) w.sample(milliseconds(t), counter = t * kMs);
  uint32_t last = 1;
  for (int t = 5500; t <= 11000; t += 500) last = w.sample(milliseconds(t), counter);
  EXPECT_EQ(last, 0u);
}

TEST(ShareWindowTest, IsClampedToTheWholeGpu) {
  ShareWindow w;
  w.sample(milliseconds(0), 0);
  // Two streams at once report more GPU time than wall time.
  EXPECT_EQ(w.sample(milliseconds(100), 200 * kMs), 1'000'000u);
}

TEST(ShareWindowTest, ResetForgetsTheOldCounter) {
  ShareWindow w;
  w.sample(milliseconds(0), 900 * kMs);
  w.reset();
  w.sample(milliseconds(1000), 0);
  EXPECT_EQ(w.sample(milliseconds(2000), 100 * kMs), 100'000u);
}

TEST(ShareWindowTest, ACounterThatWentBackwardsGivesZero) {
  ShareWindow w;
  w.sample(milliseconds(0), 900 * kMs);
  EXPECT_EQ(w.sample(milliseconds(1000), 100 * kMs), 0u);
}

}  // namespace
}  // namespace cuslice
