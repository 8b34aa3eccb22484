// The launch monitor's estimates and bounds, without a driver: what a kernel's duration
// estimate becomes after observations (kernel_estimates), the mean kernel time, and the bound
// on queued work (queue_bound).
#include <cstdint>

#include "hook/monitor/kernel_estimates.h"
#include "hook/monitor/queue_bound.h"
#include "tests/hook/monitor_fakes.h"

namespace {

using namespace cuslice::activity;
using monitor_test::MonitorTest;

using KernelEstimates = MonitorTest;
using QueueBound = MonitorTest;

constexpr int kDev = 0;

// Launch `index` on kDev, as launched_on_device() writes it: the kernel in `slot`, estimated
// at `est`, submitted at `at`.
void remember_launch(uint64_t index, int slot, uint32_t est, int64_t at) {
  Launch& l = g_state.ring[kDev][index % kRing];
  l.kernel.store(static_cast<uint32_t>(slot) + 1);
  l.est_ns.store(est);
  l.at.store(at);
  l.seq.store(index + 1);
}

uint32_t learnt(int slot) { return g_state.kernels[slot].ns.load(); }

// Keys whose kernel slots start the same probe sequence (the table's hash of the key).
std::vector<uintptr_t> keys_of_one_bucket(size_t how_many) {
  std::vector<uintptr_t> keys;
  const auto bucket = [](uintptr_t k) { return static_cast<size_t>(k * 0x9E3779B97F4A7C15ull >> 52); };
  const size_t target = bucket(1);
  for (uintptr_t k = 1; keys.size() < how_many; ++k)
    if (bucket(k) == target) keys.push_back(k);
  return keys;
}

TEST_F(KernelEstimates, AKernelKeepsItsSlotAndAnotherGetsItsOwn) {
  const int a = kernel_slot(0x1234);
  const int b = kernel_slot(0x5678);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  EXPECT_NE(a, b);
  EXPECT_EQ(kernel_slot(0x1234), a);
  EXPECT_EQ(g_state.kernels[a].key.load(), 0x1234u);
}

TEST_F(KernelEstimates, AKeyPastTheProbesHasNoSlot) {
  const std::vector<uintptr_t> keys = keys_of_one_bucket(kKernelProbes + 1);
  for (int i = 0; i < kKernelProbes; ++i) EXPECT_GE(kernel_slot(keys[i]), 0) << i;
  EXPECT_EQ(kernel_slot(keys[kKernelProbes]), -1);
  EXPECT_GE(kernel_slot(keys[0]), 0);  // those already in are still found
}

TEST_F(KernelEstimates, AnUnmeasuredKernelIsEstimatedAtTheMean) {
  Device& dev = g_state.devices[kDev];
  dev.mean_ns.store(7'000);
  const int slot = kernel_slot(42);
  EXPECT_EQ(estimate(static_cast<uint32_t>(slot) + 1, dev), 7'000u);
  g_state.kernels[slot].ns.store(123);
  EXPECT_EQ(estimate(static_cast<uint32_t>(slot) + 1, dev), 123u);
  EXPECT_EQ(estimate(0, dev), 7'000u);  // no kernel named: the mean
}

TEST_F(KernelEstimates, TheFirstObservationIsTheTimeTheBatchTook) {
  Device& dev = g_state.devices[kDev];
  const int slot = kernel_slot(1);
  // The previous launches completed at 1000; this one was submitted later, at 1500: its time
  // starts there, and it was seen complete at 11'500.
  dev.learnt_at = 1'000;
  remember_launch(0, slot, 5'000, 1'500);
  learn(dev, kDev, 11'500, 11'000, 1);
  EXPECT_EQ(learnt(slot), 10'000u);
  EXPECT_EQ(dev.learnt, 1u);
  EXPECT_EQ(dev.learnt_at, 11'000);  // the look before it was seen: completion is seen late
}

TEST_F(KernelEstimates, TimeStartsWhenThePreviousCompletedIfTheLaunchWasQueuedBehindThem) {
  Device& dev = g_state.devices[kDev];
  const int slot = kernel_slot(1);
  dev.learnt_at = 4'000;
  remember_launch(0, slot, 5'000, 1'000);  // submitted before the previous ones completed
  learn(dev, kDev, 10'000, 0, 1);
  EXPECT_EQ(learnt(slot), 6'000u);
  EXPECT_EQ(dev.learnt_at, 10'000);  // no look before: now
}

TEST_F(KernelEstimates, ABatchIsSharedInProportionToTheEstimatesItWasLaunchedWith) {
  Device& dev = g_state.devices[kDev];
  const int a = kernel_slot(1), b = kernel_slot(2);
  dev.learnt_at = 1;
  remember_launch(0, a, 1'000, 1);
  remember_launch(1, b, 3'000, 1);
  learn(dev, kDev, 8'001, 0, 2);
  EXPECT_EQ(learnt(a), 2'000u);
  EXPECT_EQ(learnt(b), 6'000u);
}

TEST_F(KernelEstimates, ALaterObservationMovesTheEstimateAnEighthOfTheWay) {
  Device& dev = g_state.devices[kDev];
  const int slot = kernel_slot(1);
  g_state.kernels[slot].ns.store(8'000);
  dev.learnt_at = 100;
  remember_launch(0, slot, 8'000, 100);
  learn(dev, kDev, 16'100, 0, 1);  // took 16'000
  EXPECT_EQ(learnt(slot), 9'000u);
  // And the right estimate is a fixed point.
  remember_launch(1, slot, 9'000, 16'100);
  learn(dev, kDev, 25'100, 0, 2);
  EXPECT_EQ(learnt(slot), 9'000u);
}

TEST_F(KernelEstimates, AKernelLaunchedTwiceInTheBatchMovesTwice) {
  Device& dev = g_state.devices[kDev];
  const int slot = kernel_slot(1);
  g_state.kernels[slot].ns.store(8'000);
  dev.learnt_at = 1;
  remember_launch(0, slot, 8'000, 1);
  remember_launch(1, slot, 8'000, 1);
  learn(dev, kDev, 32'001, 0, 2);  // 16'000 each: 8000 -> 9000 -> 9875
  EXPECT_EQ(learnt(slot), 9'875u);
}

TEST_F(KernelEstimates, ALaunchWithoutAnEntryCountsAtTheMeanAndLearnsNothing) {
  Device& dev = g_state.devices[kDev];
  const int a = kernel_slot(1);
  dev.mean_ns.store(1'000);
  dev.learnt_at = 1;
  remember_launch(0, a, 1'000, 1);
  // Launch 1 was made while nothing was bounded: no entry (the slot holds an older launch).
  remember_launch(1 + kRing, a, 50, 1);
  learn(dev, kDev, 4'001, 0, 2);
  EXPECT_EQ(learnt(a), 2'000u);  // half of the batch: the other half is the unnamed launch's
}

TEST_F(KernelEstimates, NothingIsLearntWhileTheTokenWasElsewhere) {
  Device& dev = g_state.devices[kDev];
  const int slot = kernel_slot(1);
  dev.learnt_at = 1;
  dev.disturbed = true;
  remember_launch(0, slot, 1'000, 1);
  learn(dev, kDev, 100'000, 90'000, 1);
  EXPECT_EQ(learnt(slot), 0u);
  // The launches are accounted for all the same, and the next batch learns again.
  EXPECT_EQ(dev.learnt, 1u);
  EXPECT_EQ(dev.learnt_at, 90'000);
  EXPECT_FALSE(dev.disturbed);
  remember_launch(1, slot, 1'000, 90'000);
  learn(dev, kDev, 95'000, 0, 2);
  EXPECT_EQ(learnt(slot), 5'000u);
}

TEST_F(KernelEstimates, NothingIsLearntWithoutAStartOrPastTheRing) {
  Device& dev = g_state.devices[kDev];
  const int slot = kernel_slot(1);
  remember_launch(0, slot, 1'000, 1);
  learn(dev, kDev, 10'000, 0, 1);  // learnt_at 0: when the batch could start is unknown
  EXPECT_EQ(learnt(slot), 0u);
  EXPECT_EQ(dev.learnt_at, 10'000);
  for (uint64_t i = 1; i <= kRing + 1; ++i) remember_launch(i, slot, 1'000, 10'000);
  learn(dev, kDev, 20'000, 0, kRing + 2);  // more completed than the ring remembers
  EXPECT_EQ(learnt(slot), 0u);
  EXPECT_EQ(dev.learnt, kRing + 2);
}

TEST_F(KernelEstimates, NoCompletionsLeaveEverythingAsItWas) {
  Device& dev = g_state.devices[kDev];
  dev.learnt = 5;
  dev.learnt_at = 77;
  dev.disturbed = true;
  learn(dev, kDev, 1'000, 900, 5);
  EXPECT_EQ(dev.learnt, 5u);
  EXPECT_EQ(dev.learnt_at, 77);
  EXPECT_TRUE(dev.disturbed);
}

TEST_F(KernelEstimates, RetiringTakesTheEstimatesOfCompletedLaunchesOffTheQueue) {
  Device& dev = g_state.devices[kDev];
  dev.added_ns.store(6'000);
  remember_launch(0, 0, 1'000, 1);
  remember_launch(1, 0, 2'000, 1);
  remember_launch(2, 0, 3'000, 1);
  retire_estimates(dev, kDev, 2);
  EXPECT_EQ(dev.retired_ns.load(), 3'000);
  EXPECT_EQ(dev.queued(), 3'000);
  EXPECT_EQ(dev.retired, 2u);
  retire_estimates(dev, kDev, 2);  // nothing new
  EXPECT_EQ(dev.retired_ns.load(), 3'000);
  // An entry that is not the launch's (made unbounded) counts nothing.
  remember_launch(3 + kRing, 0, 9'999, 1);
  retire_estimates(dev, kDev, 4);
  EXPECT_EQ(dev.retired_ns.load(), 6'000);
  EXPECT_EQ(dev.queued(), 0);
}

TEST_F(KernelEstimates, RetiringCountsOnlyTheLaunchesTheRingStillHolds) {
  Device& dev = g_state.devices[kDev];
  for (uint64_t i = 0; i < 2 * kRing; ++i) remember_launch(i, 0, 1, 1);
  retire_estimates(dev, kDev, 2 * kRing);
  EXPECT_EQ(dev.retired_ns.load(), static_cast<int64_t>(kRing));
}

TEST_F(KernelEstimates, TheMeanIsTimeInFlightPerCompletedLaunch) {
  Device& dev = g_state.devices[kDev];
  dev.busy_since = 1'000;
  dev.in_flight_ns = 8'000;
  account(dev, 0, 11'000, 4);
  EXPECT_EQ(monitor_test::client.reported_ns, 10'000u);  // the busy interval is reported
  EXPECT_EQ(dev.mean_ns.load(), 2'000u);
  EXPECT_EQ(dev.completed_accounted, 4u);
  EXPECT_EQ(dev.in_flight_ns, 0);
  // Decaying: the next interval, 4 launches in 40'000, moves it: (0.9*8000 + 40000) / (0.9*4 + 4).
  dev.busy_since = 11'000;
  dev.in_flight_ns = 40'000;
  account(dev, 0, 51'000, 8);
  EXPECT_EQ(dev.mean_ns.load(), static_cast<uint32_t>((0.9 * 8'000 + 40'000) / (0.9 * 4 + 4)));
}

TEST_F(KernelEstimates, AnIntervalWithoutCompletionsCountsForNothingUnlessRecordsWereHeld) {
  Device& dev = g_state.devices[kDev];
  dev.busy_since = 0;
  dev.in_flight_ns = 5'000;
  account(dev, 0, 5'000, 0);
  EXPECT_EQ(dev.mean_ns.load(), 0u);
  EXPECT_EQ(dev.in_flight_ns, 0);  // dropped: held back work is in flight, not running
  // Records held off while launches kept coming: the busy time since a launch was last seen
  // complete adds up (5'000 + 3'000 + 6'000), and goes to the launches that complete.
  dev.carry_unlearnt = true;
  dev.busy_since = 0;
  account(dev, 0, 3'000, 0);
  dev.busy_since = 3'000;
  account(dev, 0, 9'000, 3);  // nothing sampled in flight
  EXPECT_EQ(dev.mean_ns.load(), 14'000u / 3);
  EXPECT_FALSE(dev.carry_unlearnt);
  EXPECT_EQ(dev.busy_unlearnt_ns, 0);
}

TEST_F(QueueBound, TheLaunchesAlwaysAllowedNeverWait) {
  Device& dev = g_state.devices[kDev];
  dev.mean_ns.store(1'000);
  EXPECT_FALSE(too_deep(dev, kMinInFlight - 1, 1'000'000'000));
  EXPECT_TRUE(too_deep(dev, kMinInFlight, 500'000));
  g_state.higher.store(true);  // below a higher tenant, only one
  EXPECT_FALSE(too_deep(dev, kMinInFlightBelowHigher - 1, 1'000'000'000));
  EXPECT_TRUE(too_deep(dev, kMinInFlightBelowHigher, 250'000));
}

TEST_F(QueueBound, TheBoundIsEstimatedTimeAndTighterBelowAHigherTenant) {
  Device& dev = g_state.devices[kDev];
  dev.mean_ns.store(1'000);
  EXPECT_FALSE(too_deep(dev, 10, 499'999));
  EXPECT_TRUE(too_deep(dev, 10, 500'000));
  EXPECT_EQ(bound_ns(), 500'000);
  EXPECT_EQ(segment_ns(), 250'000);
  g_state.higher.store(true);
  EXPECT_FALSE(too_deep(dev, 10, 249'999));
  EXPECT_TRUE(too_deep(dev, 10, 250'000));
  EXPECT_EQ(bound_ns(), 250'000);
  EXPECT_EQ(segment_ns(), 125'000);
}

TEST_F(QueueBound, UnknownKernelTimesBoundOnlyTheCount) {
  Device& dev = g_state.devices[kDev];  // mean 0: nothing measured yet
  EXPECT_FALSE(too_deep(dev, 10, 1'000'000'000));
  EXPECT_FALSE(too_deep(dev, kRing / 2 - 1, 1'000'000'000));
  EXPECT_TRUE(too_deep(dev, kRing / 2, 0));  // more in flight than half the ring: deep
}

TEST_F(QueueBound, TheQueuedTimeIsNeverNegative) {
  Device& dev = g_state.devices[kDev];
  dev.added_ns.store(100);
  dev.retired_ns.store(300);
  EXPECT_EQ(dev.queued(), 0);
  dev.added_ns.store(1'000);
  EXPECT_EQ(dev.queued(), 700);
}

TEST_F(QueueBound, ParkingsCapIsQueuedTimeOrHalfTheRing) {
  Device& dev = g_state.devices[kDev];
  dev.added_ns.store(20'000'000 - 1);
  EXPECT_FALSE(over_cap(dev));
  dev.added_ns.store(20'000'000);
  EXPECT_TRUE(over_cap(dev));
  dev.added_ns.store(0);
  dev.launched.store(kRing / 2);
  EXPECT_TRUE(over_cap(dev));
  dev.completed.store(1);
  EXPECT_FALSE(over_cap(dev));
}

TEST_F(QueueBound, WaitersAtTheCapGoOnlyOnceBelowItOrIdle) {
  Device& dev = g_state.devices[kDev];
  dev.cap.store(1);
  dev.busy.store(1);
  dev.added_ns.store(30'000'000);
  release_cap(dev);
  EXPECT_EQ(dev.cap.load(), 1u);  // still over the cap
  dev.busy.store(0);
  release_cap(dev);
  EXPECT_EQ(dev.cap.load(), 0u);  // idle: whatever the sums say
  dev.cap.store(1);
  dev.busy.store(1);
  dev.retired_ns.store(30'000'000);
  release_cap(dev);
  EXPECT_EQ(dev.cap.load(), 0u);
}

TEST_F(QueueBound, AThrottleRaisedWakesTheMonitorAndClearedLetsWaitersGo) {
  Device& dev = g_state.devices[kDev];
  const uint32_t wake = g_state.wake.load();
  raise_throttle(dev);
  EXPECT_EQ(dev.throttle.load(), 1u);
  EXPECT_EQ(g_state.wake.load(), wake + 1);
  clear_throttle(dev);
  EXPECT_EQ(dev.throttle.load(), 0u);
  wait_throttle(dev);  // returns at once
}

}  // namespace
