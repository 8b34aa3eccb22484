// What ListAndWatch advertises (device_plugin/advertised_devices.h, gpu_table.h): one ID per
// GiB a GPU can hand out and per percent of it, healthy only while the GPU is present and the
// scheduler answers.
#include <gtest/gtest.h>

#include "ledger_test_support.h"

namespace cuslice::device_plugin {
namespace {

TEST(Ledger, AdvertisesOneMemoryIdPerGibAndOneComputeIdPerPercentPerGpu) {
  for (int gpus : {1, 2, 8}) {
    Ledger l = ledger_with(gpus);
    EXPECT_EQ(l.memory_devices().size(), 16u * gpus);
    EXPECT_EQ(healthy(l.memory_devices()), 16u * gpus);
    EXPECT_EQ(l.compute_devices().size(), 100u * gpus);
    EXPECT_EQ(healthy(l.compute_devices()), 100u * gpus);
  }
}

TEST(Ledger, CapacityIsWhatIsNotHeldBackRoundedDown) {
  Ledger l = ledger_with(2, 80 * GiB - 400 * (GiB >> 10));  // an H100's 79.6 GiB
  EXPECT_EQ(l.capacity_units(l.gpus()[0]), 79u);
  l.set_held_back(1, 20 * GiB + 1);
  EXPECT_EQ(l.capacity_units(l.gpus()[1]), 59u);  // 59.6 GiB left
  EXPECT_EQ(l.memory_devices().size(), 79u + 59u);
}

TEST(Ledger, EverythingIsUnhealthyWithoutTheScheduler) {
  Ledger l = ledger_with(2);
  l.set_scheduler_reachable(false);
  EXPECT_EQ(healthy(l.memory_devices()), 0u);
  EXPECT_EQ(healthy(l.compute_devices()), 0u);
  l.set_scheduler_reachable(true);
  EXPECT_EQ(healthy(l.memory_devices()), 32u);
}

TEST(Ledger, AGpuThatDisappearsTurnsUnhealthyAndComesBack) {
  Ledger l = ledger_with(2);
  l.set_gpus({{0, uuid(0), 16 * GiB, 0, true}});
  EXPECT_EQ(l.memory_devices().size(), 32u);  // still listed
  EXPECT_EQ(healthy(l.memory_devices()), 16u);
  EXPECT_EQ(healthy(l.compute_devices()), 100u);
  EXPECT_NE(l.allocate_memory(ids(1, {0}), Clock::now(), "t", "k").error, "");
  l.set_gpus({{0, uuid(0), 16 * GiB, 0, true}, {1, uuid(1), 16 * GiB, 0, true}});
  EXPECT_EQ(healthy(l.memory_devices()), 32u);
}

TEST(Ledger, UnitsStillHeldAboveAShrunkCapacityStayHealthyUntilGivenBack) {
  Ledger l = ledger_with(1);
  l.allocate_memory(ids(0, {14, 15}), Clock::now(), "a", "k");
  l.set_held_back(0, 4 * GiB);  // a ConfigMap tenant with a 4 GiB quota appeared
  const auto devices = l.memory_devices();
  EXPECT_EQ(devices.size(), 16u);
  EXPECT_EQ(healthy(devices), 14u);  // 0-11 free and usable, 14-15 held; 12-13 unhealthy
  EXPECT_FALSE(devices[12].healthy);
  EXPECT_TRUE(devices[15].healthy);
}

}  // namespace
}  // namespace cuslice::device_plugin
