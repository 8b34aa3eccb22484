// The check at a container's start (device_plugin/container_start.h): compute needs memory
// beside it, and must fit that memory's GPU.
#include <gtest/gtest.h>

#include "tests/device_plugin/ledger_test_support.h"

namespace cuslice::device_plugin {
namespace {

TEST(Ledger, AContainerWithComputeButNoMemoryMayNotStart) {
  Ledger l = ledger_with(1);
  const auto t = Clock::now();
  const StartOutcome out = l.start_compute(compute_ids(50), {holding("p", "c", {}, 50)}, t);
  EXPECT_EQ(out.error,
            "cuslice.io/gpu-compute: container ns/p/c asks for 50% of a GPU but for no cuslice.io/gpu-memory: compute "
            "is a share of the GPU the container's memory is on, so it would get no GPU; ask for "
            "cuslice.io/gpu-memory too");
  EXPECT_EQ(out.tenant, "");
}

TEST(Ledger, AContainerWhoseComputeFitsStartsWithItsShare) {
  Ledger l = ledger_with(1);
  const auto t = Clock::now();
  TestKubelet kubelet{l};
  ASSERT_EQ(kubelet.admit("k8s-a", 2, 40, false, t), 0);
  const StartOutcome out = l.start_compute(kubelet.containers[0].compute_ids, kubelet.containers, t);
  EXPECT_EQ(out.error, "");
  EXPECT_EQ(out.tenant, "k8s-a");
  EXPECT_EQ(l.share_ppm(l.allocations().at("k8s-a")), 400'000u);
}

TEST(Ledger, AContainerWhoseComputeDoesNotFitItsGpuWaitsForRoom) {
  // Two containers whose calls were paired wrongly end on one GPU with 70% each (what only
  // PodResources shows): the first to start is refused, the other starts.
  Ledger l = ledger_with(2);
  const auto t = Clock::now();
  l.allocate_memory(ids(0, {0}), t, "k8s-a", "k");
  l.allocate_memory(ids(0, {1}), t, "k8s-b", "k");
  const std::vector<Holding> pods{holding("a", "c", ids(0, {0}), 70, 0), holding("b", "c", ids(0, {1}), 70, 70)};
  const StartOutcome refused = l.start_compute(pods[0].compute_ids, pods, t);
  EXPECT_EQ(refused.error,
            "cuslice.io/gpu-compute: container ns/a/c asks for 70% of GPU 0 (" + uuid(0) +
                "), where its memory is, but only 30% of that GPU's compute is free; it starts once enough is (or "
                "ask for 30% or less)");
  EXPECT_EQ(l.start_compute(pods[1].compute_ids, pods, t).error, "");
  // Refused, a counts as a container without compute: b has its share, a what is left.
  EXPECT_EQ(l.share_ppm(l.allocations().at("k8s-b")), 700'000u);
  EXPECT_EQ(l.share_ppm(l.allocations().at("k8s-a")), 0u);
  EXPECT_NE(l.start_compute(pods[0].compute_ids, pods, t).error, "");  // the kubelet tries again
  // b goes: a starts.
  const std::vector<Holding> later{pods[0]};
  l.reconcile(later, t);
  l.reconcile(later, t + std::chrono::seconds(5));
  EXPECT_EQ(l.start_compute(pods[0].compute_ids, later, t + std::chrono::seconds(5)).error, "");
  EXPECT_EQ(l.share_ppm(l.allocations().at("k8s-a")), 700'000u);
}

TEST(Ledger, AContainerPodResourcesDoesNotListStartsUnchecked) {
  Ledger l = ledger_with(1);
  const StartOutcome out = l.start_compute(compute_ids(10), {}, Clock::now());
  EXPECT_EQ(out.error, "");
  EXPECT_EQ(out.tenant, "");
}

}  // namespace
}  // namespace cuslice::device_plugin
