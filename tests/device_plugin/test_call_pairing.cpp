// A container's two Allocate calls (device_plugin/call_pairing.h, allocate_request.h): the
// compute call just before or just after a memory call is that container's, when it fits.
#include <gtest/gtest.h>

#include "tests/device_plugin/ledger_test_support.h"

namespace cuslice::device_plugin {
namespace {

using std::chrono::seconds;

TEST(LedgerCallPairing, OneCallWaitsForTheOtherWithinTheWindow) {
  CallPairing p(seconds(10));
  const auto t = Clock::now();
  EXPECT_FALSE(p.memory_waiting(t));
  p.memory_call("k8s-a", /*paired=*/false, t);
  EXPECT_EQ(p.memory_waiting(t + seconds(10)), "k8s-a");
  EXPECT_FALSE(p.memory_waiting(t + seconds(11)));
  EXPECT_FALSE(p.last_compute(t));
  p.compute_call(compute_ids(30), /*paired=*/true, t);  // the last call only
  EXPECT_FALSE(p.memory_waiting(t));
  EXPECT_FALSE(p.compute_waiting(t));
  ASSERT_TRUE(p.last_compute(t));
  EXPECT_EQ(p.last_compute(t)->size(), 30u);
  p.settle_compute(/*waits=*/true);  // PodResources: the next container's after all
  EXPECT_EQ(p.compute_waiting(t), 30u);
  p.clear();
  EXPECT_FALSE(p.compute_waiting(t));
  EXPECT_FALSE(p.last_compute(t));
}

TEST(Ledger, AComputeCallBeforeTheMemoryCallPlacesAndSharesTheTenant) {
  Ledger l = ledger_with(2);
  const auto t = Clock::now();
  l.allocate_memory(ids(0, {0}), t, "k8s-x", "k");  // a container's memory call,
  l.allocate_compute(compute_ids(40, 0), t);        // its compute call right after,
  l.allocate_compute(compute_ids(70, 40), t);       // and the next container's compute call first
  // 70% does not fit GPU 0 beside the first 40%: the next container's memory goes to GPU 1.
  EXPECT_EQ(gpus_of(l.preferred_memory(all_ids(l.memory_devices()), {}, 2, t)), std::set<std::string>{uuid(1)});
  const Allocation* a = l.allocate_memory(ids(1, {0, 1}), t, "k8s-a", "k").allocation;
  ASSERT_TRUE(a);
  EXPECT_EQ(a->compute_percent, 70u);
  EXPECT_EQ(l.share_ppm(*a), 700'000u);
  EXPECT_EQ(l.allocations().at("k8s-x").compute_percent, 40u);  // paired with the memory before
}

TEST(Ledger, AComputeCallAfterTheMemoryCallSetsItsShare) {
  Ledger l = ledger_with(1);
  const auto t = Clock::now();
  const Allocation* a = l.allocate_memory(ids(0, {0, 1}), t, "k8s-a", "k").allocation;
  EXPECT_EQ(l.share_ppm(*a), 0u);  // compute not known yet: what the GPU's shares leave
  EXPECT_EQ(l.allocate_compute(compute_ids(25), t), "");
  EXPECT_EQ(a->compute_percent, 25u);
  EXPECT_EQ(l.share_ppm(*a), 250'000u);
  // Paired: the next compute call is not this container's.
  EXPECT_EQ(l.allocate_compute(compute_ids(10, 25), t), "");
  EXPECT_EQ(a->compute_percent, 25u);
}

TEST(Ledger, ComputeThatDoesNotFitTheMemoryBeforeWaitsForTheNextMemoryCall) {
  Ledger l = ledger_with(2);
  const auto t = Clock::now();
  TestKubelet kubelet{l};
  ASSERT_EQ(kubelet.admit("k8s-a", 2, 80, true, t), 0);
  // A memory-only container lands beside it (binpack), then a container of 50% whose
  // compute call comes first: not the memory-only one's, which could not hold it.
  const Allocation* m = l.allocate_memory(ids(0, {2}), t, "k8s-m", "k").allocation;
  EXPECT_EQ(l.allocate_compute(compute_ids(50, 80), t), "");
  EXPECT_EQ(m->compute_percent, 0u);
  EXPECT_EQ(gpus_of(l.preferred_memory(all_ids(l.memory_devices()), {}, 2, t)), std::set<std::string>{uuid(1)});
}

TEST(Ledger, ACallOutsideTheWindowPairsWithNothing) {
  LedgerOptions o;
  o.pairing_window = seconds(5);
  Ledger l = ledger_with(1, 16 * GiB, o);
  const auto t = Clock::now();
  l.allocate_compute(compute_ids(30), t);
  const Allocation* a = l.allocate_memory(ids(0, {0}), t + seconds(6), "k8s-a", "k").allocation;
  EXPECT_EQ(a->compute_percent, 0u);
}

TEST(Ledger, ARefusedCallLeavesNothingWaiting) {
  Ledger l = ledger_with(2);
  const auto t = Clock::now();
  l.allocate_compute(compute_ids(30), t);
  EXPECT_NE(l.allocate_memory({memory_id(uuid(0), 0), memory_id(uuid(1), 0)}, t, "k8s-a", "k").error, "");
  const Allocation* b = l.allocate_memory(ids(0, {0}), t, "k8s-b", "k").allocation;
  EXPECT_EQ(b->compute_percent, 0u);
}

TEST(Ledger, PodResourcesSettlesWhoseTheComputeCallJustBeforeWas) {
  Ledger l = ledger_with(2);
  const auto t = Clock::now();
  TestKubelet kubelet{l};
  ASSERT_EQ(kubelet.admit("k8s-a", 2, 70, true, t), 0);
  ASSERT_EQ(kubelet.admit("k8s-m", 1, 0, true, t), 1);  // memory only: where the least compute is promised
  // The next container's compute call comes first, and is taken as m's, which it fits.
  const std::vector<std::string> b_compute = compute_ids(70, 70);
  ASSERT_EQ(l.allocate_compute(b_compute, t), "");
  EXPECT_EQ(l.allocations().at("k8s-m").compute_percent, 70u);
  // Its memory call: PodResources shows that compute held by a container with no memory yet.
  ASSERT_TRUE(l.pairing_needs_pods(t));
  std::vector<Holding> listed = kubelet.containers;
  listed.push_back(Holding{{"ns", "b", "c"}, {}, b_compute});
  l.settle_pairing(listed, t + std::chrono::milliseconds(1));
  EXPECT_EQ(l.allocations().at("k8s-m").compute_percent, 0u);
  // 70% fits GPU 1 only (GPU 0 has 70% promised).
  const auto chosen = l.preferred_memory(all_ids(l.memory_devices()), {}, 2, t);
  EXPECT_EQ(gpus_of(chosen), std::set<std::string>{uuid(1)});
  EXPECT_EQ(l.allocate_memory(chosen, t, "k8s-b", "k").allocation->compute_percent, 70u);
}

TEST(Ledger, PodResourcesConfirmsAComputeCallWasTheContainersBefore) {
  Ledger l = ledger_with(1);
  const auto t = Clock::now();
  TestKubelet kubelet{l};
  ASSERT_EQ(kubelet.admit("k8s-a", 2, 30, /*compute_first=*/false, t), 0);
  ASSERT_TRUE(l.pairing_needs_pods(t));
  l.settle_pairing(kubelet.containers, t + std::chrono::milliseconds(1));
  EXPECT_EQ(l.allocations().at("k8s-a").compute_percent, 30u);
  const Allocation* b = l.allocate_memory(ids(0, {8}), t, "k8s-b", "k").allocation;
  EXPECT_EQ(b->compute_percent, 0u);
}

}  // namespace
}  // namespace cuslice::device_plugin
