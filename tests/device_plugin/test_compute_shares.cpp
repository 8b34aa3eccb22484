// Tenants' shares and caps (device_plugin/compute_shares.h).
#include <gtest/gtest.h>

#include "tests/device_plugin/ledger_test_support.h"

namespace cuslice::device_plugin {
namespace {

TEST(Ledger, CapComputeMakesTheShareACap) {
  LedgerOptions o;
  o.cap_compute = true;
  Ledger l = ledger_with(1, 16 * GiB, o);
  const Allocation* a = l.allocate_memory(ids(0, {0}), Clock::now(), "k8s-a", "k").allocation;
  l.reconcile({holding("p", "c", ids(0, {0}), 25)}, Clock::now());
  EXPECT_EQ(l.limit_ppm(*a), 250'000u);
}

TEST(Ledger, AContainerOfMemoryOnlyLeavesItsShareToTheScheduler) {
  Ledger l = ledger_with(2);
  const auto t = Clock::now();
  l.allocate_memory(ids(0, {0}), t, "a", "k");
  l.allocate_memory(ids(0, {1}), t, "c", "k");
  l.allocate_memory(ids(1, {0}), t, "d", "k");
  l.reconcile({holding("a", "c", ids(0, {0}), 80, 0), holding("c", "c", ids(0, {1})), holding("d", "c", ids(1, {0}))},
              t);
  EXPECT_EQ(l.share_ppm(l.allocations().at("a")), 800'000u);
  // 0: the scheduler splits what GPU 0's explicit shares leave (at least 1% each).
  EXPECT_EQ(l.share_ppm(l.allocations().at("c")), 0u);
  EXPECT_EQ(l.share_ppm(l.allocations().at("d")), 0u);
}

TEST(Ledger, TheSharesOnAGpuLeaveOnePercentToEachContainerWithout) {
  // The scheduler's rule: a GPU's explicit shares and 1% for each tenant without one fit in it.
  Ledger l = ledger_with(1);
  TestKubelet kubelet{l};
  const auto t = Clock::now();
  ASSERT_EQ(kubelet.admit("a", 1, 60, true, t), 0);
  ASSERT_EQ(kubelet.admit("b", 1, 0, true, t), 0);
  ASSERT_EQ(kubelet.admit("c", 1, 0, true, t), 0);
  ASSERT_EQ(kubelet.admit("d", 1, 38, false, t), 0);  // 60 + 38 + 1 + 1
  EXPECT_EQ(kubelet.admit("e", 1, 1, false, t), -1);   // no compute left for it
  uint32_t sum = 0;
  for (const auto& [name, a] : l.allocations()) sum += l.share_ppm(a) > 0 ? l.share_ppm(a) : 10'000u;
  EXPECT_EQ(sum, 1'000'000u);
  EXPECT_EQ(l.share_ppm(l.allocations().at("b")), 0u);
}

}  // namespace
}  // namespace cuslice::device_plugin
