// Placement (device_plugin/placement.h): a GPU where memory and compute both fit, chosen by
// the policy; and through the ledger, what the kubelet's calls make of it.
#include <gtest/gtest.h>

#include <map>

#include "device_plugin/placement.h"
#include "tests/device_plugin/ledger_test_support.h"

namespace cuslice::device_plugin {
namespace {

// Four 16 GiB GPUs with `free` GiB offered and `promised` percent of compute each.
std::vector<GpuRoom> rooms(std::vector<uint32_t> free, std::vector<uint32_t> promised) {
  std::vector<GpuRoom> out;
  for (size_t i = 0; i < free.size(); ++i) out.push_back({uint32_t(i), 16, free[i], free[i], {promised[i], 0}});
  return out;
}

TEST(LedgerPlacement, BothMemoryAndComputeMustFit) {
  const auto r = rooms({12, 16, 16, 16}, {60, 0, 0, 0});
  EXPECT_EQ(choose_gpu(r, {4, 40}, PlacementPolicy::kBinpack), 0u);  // 60 + 40 = 100
  EXPECT_EQ(choose_gpu(r, {4, 60}, PlacementPolicy::kBinpack), 1u);
  EXPECT_EQ(choose_gpu(r, {13, 10}, PlacementPolicy::kBinpack), 1u);
  EXPECT_FALSE(choose_gpu(r, {17, 10}, PlacementPolicy::kBinpack));
  // Containers without compute keep 1% each.
  std::vector<GpuRoom> crowded = rooms({8, 16}, {60, 0});
  crowded[0].compute.memory_only = 1;
  EXPECT_EQ(choose_gpu(crowded, {1, 40}, PlacementPolicy::kBinpack), 1u);
  EXPECT_EQ(choose_gpu(crowded, {1, 39}, PlacementPolicy::kBinpack), 0u);
}

TEST(LedgerPlacement, BinpackTakesTheFullestThatFitsSpreadTheEmptiest) {
  const auto r = rooms({4, 10, 16, 16}, {0, 30, 0, 0});
  EXPECT_EQ(choose_gpu(r, {4, 10}, PlacementPolicy::kBinpack), 0u);
  EXPECT_EQ(choose_gpu(r, {5, 10}, PlacementPolicy::kBinpack), 1u);
  EXPECT_EQ(choose_gpu(r, {4, 10}, PlacementPolicy::kSpread), 2u);  // ties: the lower index
}

TEST(LedgerPlacement, ComputeNotKnownGoesWhereTheLeastComputeIsPromised) {
  // The compute that follows fits there whenever it fits anywhere the memory does.
  const auto r = rooms({12, 8, 16, 16}, {10, 0, 70, 0});
  EXPECT_EQ(choose_gpu(r, {4, std::nullopt}, PlacementPolicy::kBinpack), 1u);
  EXPECT_EQ(choose_gpu(r, {4, std::nullopt}, PlacementPolicy::kSpread), 3u);
  EXPECT_EQ(choose_gpu(r, {9, std::nullopt}, PlacementPolicy::kBinpack), 3u);
}

TEST(LedgerPlacement, ComputeKnownThatFitsNowhereIsPlacedAsIfNotKnown) {
  // The compute call just before may have been another container's.
  const auto r = rooms({16, 16}, {50, 20});
  EXPECT_EQ(choose_gpu(r, {4, 90}, PlacementPolicy::kBinpack), 1u);
}

TEST(LedgerPlacement, WithNoComputeFreeAnywhereTheMemoryAloneDecides) {
  const auto r = rooms({2, 8}, {100, 100});
  EXPECT_EQ(choose_gpu(r, {2, std::nullopt}, PlacementPolicy::kBinpack), 0u);
  EXPECT_EQ(choose_gpu(r, {3, 10}, PlacementPolicy::kBinpack), 1u);
}

TEST(LedgerPlacement, ThePolicyWeighsAllTheMemoryFreeNotOnlyWhatIsOffered) {
  // GPU 1 offers 4 of its 16 free GiB (the node can take few more containers): still the emptiest.
  std::vector<GpuRoom> r = rooms({8, 4}, {0, 0});
  r[1].unused_units = 16;
  EXPECT_EQ(choose_gpu(r, {2, 10}, PlacementPolicy::kSpread), 1u);
  EXPECT_EQ(choose_gpu(r, {2, 10}, PlacementPolicy::kBinpack), 0u);
}

TEST(LedgerPlacement, PolicyNames) {
  EXPECT_EQ(parse_placement("binpack"), PlacementPolicy::kBinpack);
  EXPECT_EQ(parse_placement("spread"), PlacementPolicy::kSpread);
  EXPECT_FALSE(parse_placement("random"));
  EXPECT_STREQ(placement_name(PlacementPolicy::kSpread), "spread");
}

// Four containers of 4 GiB and 60% on four 16 GiB GPUs, whichever of their calls comes first.
TEST(Ledger, FourContainersOfSixtyPercentLandOnFourGpusInEitherOrder) {
  for (const bool compute_first : {true, false}) {
    Ledger l = ledger_with(4);
    TestKubelet kubelet{l};
    std::set<int> gpus;
    for (int i = 0; i < 4; ++i) {
      std::string error;
      const int gpu = kubelet.admit("p" + std::to_string(i), 4, 60, compute_first, Clock::now(), &error);
      ASSERT_GE(gpu, 0) << error;
      gpus.insert(gpu);
    }
    EXPECT_EQ(gpus, (std::set<int>{0, 1, 2, 3})) << "compute first: " << compute_first;
    for (const auto& [name, a] : l.allocations()) EXPECT_EQ(l.share_ppm(a), 600'000u) << name;
  }
}

TEST(Ledger, TwentyContainersOfOneGibBinpackedOrSpread) {
  const auto place = [](PlacementPolicy policy) {
    LedgerOptions o;
    o.placement = policy;
    Ledger l = ledger_with(4, 16 * GiB, o);
    TestKubelet kubelet{l};
    std::map<int, int> per_gpu;
    for (int i = 0; i < 20; ++i) ++per_gpu[kubelet.admit("p" + std::to_string(i), 1, 0, false, Clock::now())];
    return per_gpu;
  };
  EXPECT_EQ(place(PlacementPolicy::kBinpack), (std::map<int, int>{{0, 16}, {1, 4}}));
  EXPECT_EQ(place(PlacementPolicy::kSpread), (std::map<int, int>{{0, 5}, {1, 5}, {2, 5}, {3, 5}}));
}

TEST(Ledger, BinpackFillsAGpuWithContainersOfComputeBeforeTheNext) {
  Ledger l = ledger_with(2);
  TestKubelet kubelet{l};
  std::map<int, int> per_gpu;
  for (int i = 0; i < 6; ++i) ++per_gpu[kubelet.admit("p" + std::to_string(i), 2, 30, true, Clock::now())];
  EXPECT_EQ(per_gpu, (std::map<int, int>{{0, 3}, {1, 3}}));  // 90% each: a fourth 30% fits neither
  EXPECT_EQ(kubelet.admit("p7", 2, 30, true, Clock::now()), -1);
}

}  // namespace
}  // namespace cuslice::device_plugin
