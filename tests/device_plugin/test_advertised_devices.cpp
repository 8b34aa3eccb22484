// What ListAndWatch advertises (device_plugin/advertised_devices.h, gpu_table.h): one ID per
// GiB a GPU can hand out and per percent of it, healthy only while the GPU is present and the
// scheduler answers, and never more free memory units than the containers the node can take.
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/device_plugin/ledger_test_support.h"

namespace cuslice::device_plugin {
namespace {

TEST(Ledger, AdvertisesOneMemoryIdPerGibAndOneComputeIdPerPercentPerGpu) {
  for (int gpus : {1, 2, 8}) {
    Ledger l = ledger_with(gpus);
    EXPECT_EQ(l.memory_devices().size(), 16u * gpus);
    // No more free units than the 64 tenants the scheduler holds (eight GPUs have 128).
    EXPECT_EQ(healthy(l.memory_devices()), std::min(16u * gpus, 64u));
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

TEST(LedgerAdvertisedFree, AllWithinTheBudgetElseByPolicy) {
  const std::vector<uint32_t> h100s{10, 79, 79, 79};
  EXPECT_EQ(advertised_free(h100s, 300, PlacementPolicy::kBinpack), h100s);
  // Binpack gives each GPU a floor of budget / (2 x GPUs with free units), then keeps whole the
  // GPU it fills next and the one with the most free, then levels.
  EXPECT_EQ(advertised_free(h100s, 64, PlacementPolicy::kBinpack), (std::vector<uint32_t>{10, 38, 8, 8}));
  EXPECT_EQ(advertised_free({79, 79, 79, 79}, 64, PlacementPolicy::kBinpack), (std::vector<uint32_t>{40, 8, 8, 8}));
  EXPECT_EQ(advertised_free({140, 140}, 64, PlacementPolicy::kBinpack), (std::vector<uint32_t>{48, 16}));
  EXPECT_EQ(advertised_free({8, 8, 8, 16, 0}, 30, PlacementPolicy::kBinpack),
            (std::vector<uint32_t>{8, 3, 3, 16, 0}));
  // Spread cuts the emptiest down to one level.
  EXPECT_EQ(advertised_free(h100s, 64, PlacementPolicy::kSpread), (std::vector<uint32_t>{10, 18, 18, 18}));
  EXPECT_EQ(advertised_free({16, 16, 16, 16}, 10, PlacementPolicy::kSpread), (std::vector<uint32_t>{3, 3, 2, 2}));
  EXPECT_EQ(advertised_free({16, 16}, 0, PlacementPolicy::kSpread), (std::vector<uint32_t>{0, 0}));
  EXPECT_EQ(advertised_free({16, 16}, 0, PlacementPolicy::kBinpack), (std::vector<uint32_t>{0, 0}));
}

TEST(Ledger, NoMoreFreeMemoryIsAdvertisedThanTheSchedulerHasTenantsLeft) {
  Ledger l = ledger_with(2);  // 32 GiB
  EXPECT_EQ(l.tenant_room(), 64u);
  l.set_other_tenants(60);  // the configuration file's
  EXPECT_EQ(l.tenant_room(), 4u);
  EXPECT_EQ(l.memory_devices().size(), 32u);  // all listed: the node's capacity stays
  EXPECT_EQ(healthy(l.memory_devices()), 4u);
  TestKubelet kubelet{l};
  ASSERT_GE(kubelet.admit("k8s-a", 2, 0, false, Clock::now()), 0);
  EXPECT_EQ(l.tenant_room(), 3u);
  EXPECT_EQ(healthy(l.memory_devices()), 2u + 3u);  // its own, and room for three more
  for (const char* name : {"k8s-b", "k8s-c", "k8s-d"}) ASSERT_GE(kubelet.admit(name, 1, 0, false, Clock::now()), 0);
  EXPECT_EQ(l.tenant_room(), 0u);
  EXPECT_EQ(healthy(l.memory_devices()), 5u);
  std::string error;
  EXPECT_EQ(kubelet.admit("k8s-e", 1, 0, false, Clock::now(), &error), -1);
  l.set_other_tenants(70);  // more than it holds: no room, not less
  EXPECT_EQ(l.tenant_room(), 0u);
}

TEST(Ledger, AGpuWhoseComputeIsAllPromisedAdvertisesNoFreeMemory) {
  Ledger l = ledger_with(2);
  TestKubelet kubelet{l};
  ASSERT_EQ(kubelet.admit("k8s-a", 1, 100, true, Clock::now()), 0);
  EXPECT_EQ(healthy(l.memory_devices()), 1u + 16u);
  ASSERT_EQ(kubelet.admit("k8s-b", 1, 99, true, Clock::now()), 1);
  EXPECT_EQ(healthy(l.memory_devices()), 1u + 1u + 15u);  // 1% is left on GPU 1: one more container
}

}  // namespace
}  // namespace cuslice::device_plugin
