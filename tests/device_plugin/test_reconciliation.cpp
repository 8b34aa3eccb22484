// PodResources snapshots (device_plugin/reconciliation.h): how allocations are linked to
// their containers, removed when those go, and adopted when no tenant covers them.
#include <gtest/gtest.h>

#include "tests/device_plugin/ledger_test_support.h"

namespace cuslice::device_plugin {
namespace {

TEST(Ledger, PodResourcesLinksMemoryToItsContainerAndCompute) {
  Ledger l = ledger_with(1);
  const auto t0 = Clock::now();
  const Allocation* a = l.allocate_memory(ids(0, {0, 1, 2, 3, 4, 5, 6, 7}), t0, "k8s-a", "k").allocation;
  const Allocation* b = l.allocate_memory(ids(0, {8, 9}), t0, "k8s-b", "k").allocation;
  // Before PodResources says anything: no share of their own (the scheduler splits the GPU).
  EXPECT_EQ(l.share_ppm(*a), 0u);
  auto r = l.reconcile({holding("p1", "c", ids(0, {0, 1, 2, 3, 4, 5, 6, 7}), 30), holding("p2", "c", ids(0, {8, 9}))},
                       t0);
  EXPECT_TRUE(r.removed.empty());
  EXPECT_EQ(a->workload, (Workload{"ns", "p1", "c"}));
  EXPECT_EQ(a->compute_percent, 30u);
  EXPECT_EQ(l.share_ppm(*a), 300'000u);
  EXPECT_EQ(l.share_ppm(*b), 0u);  // what compute leaves, as the scheduler splits it
  EXPECT_EQ(l.limit_ppm(*a), 1'000'000u);  // shares, not caps, by default
}

TEST(Ledger, AContainerGoneFromPodResourcesLosesItsTenantAfterTheRemovalDelay) {
  LedgerOptions o;
  o.removal_delay = std::chrono::seconds(2);
  Ledger l = ledger_with(1, 16 * GiB, o);
  const auto t0 = Clock::now();
  l.allocate_memory(ids(0, {0, 1}), t0, "k8s-a", "k");
  l.reconcile({holding("p", "c", ids(0, {0, 1}))}, t0);
  EXPECT_TRUE(l.reconcile({}, t0 + std::chrono::seconds(1)).removed.empty());
  EXPECT_TRUE(l.reconcile({}, t0 + std::chrono::milliseconds(2500)).removed.empty());  // gone 1.5 s
  // Back in a later snapshot: the count starts again.
  l.reconcile({holding("p", "c", ids(0, {0, 1}))}, t0 + std::chrono::seconds(3));
  EXPECT_TRUE(l.reconcile({}, t0 + std::chrono::seconds(4)).removed.empty());
  EXPECT_TRUE(l.reconcile({}, t0 + std::chrono::seconds(7), /*may_remove=*/false).removed.empty());
  const auto r = l.reconcile({}, t0 + std::chrono::seconds(7));
  ASSERT_EQ(r.removed.size(), 1u);
  EXPECT_EQ(r.removed[0].tenant, "k8s-a");
  EXPECT_TRUE(l.used_units(0).empty());
}

TEST(Ledger, AnAllocationNoPodWasSeenHoldingGoesAfterTheGrace) {
  LedgerOptions o;
  o.unseen_grace = std::chrono::seconds(60);
  Ledger l = ledger_with(1, 16 * GiB, o);
  const auto t0 = Clock::now();
  l.allocate_memory(ids(0, {0}), t0, "k8s-a", "k");
  EXPECT_TRUE(l.reconcile({}, t0 + std::chrono::seconds(59)).removed.empty());
  EXPECT_EQ(l.reconcile({}, t0 + std::chrono::seconds(60)).removed.size(), 1u);
}

TEST(Ledger, InitAndAppContainersSharingIdsKeepBothTenantsAndTheExactHolderLabels) {
  Ledger l = ledger_with(1);
  const auto t = Clock::now();
  l.allocate_memory(ids(0, {0, 1, 2, 3}), t, "init", "k");
  l.allocate_memory(ids(0, {0, 1}), t, "app", "k");
  // PodResources lists the app container only (the init container finished).
  const auto r = l.reconcile({holding("p", "app", ids(0, {0, 1}))}, t);
  EXPECT_TRUE(r.removed.empty());
  EXPECT_EQ(l.allocations().at("app").workload.container_name, "app");
  EXPECT_EQ(l.used_units(0), (std::set<uint32_t>{0, 1, 2, 3}));
}

TEST(Ledger, MemoryHeldByAContainerNoTenantCoversStaysCounted) {
  Ledger l = ledger_with(1);
  const auto r = l.reconcile({holding("p", "c", ids(0, {3, 4}))}, Clock::now());
  EXPECT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(l.used_units(0), (std::set<uint32_t>{3, 4}));
  // Not again while it lasts.
  EXPECT_TRUE(l.reconcile({holding("p", "c", ids(0, {3, 4}))}, Clock::now()).warnings.empty());
}

TEST(Ledger, ComputeWithoutMemoryIsWarnedAboutOnce) {
  Ledger l = ledger_with(1);
  const auto first = l.reconcile({holding("p", "c", {}, 20)}, Clock::now());
  ASSERT_EQ(first.warnings.size(), 1u);
  EXPECT_NE(first.warnings[0].find("no cuslice.io/gpu-memory"), std::string::npos);
  EXPECT_TRUE(l.reconcile({holding("p", "c", {}, 20)}, Clock::now()).warnings.empty());
}

TEST(Ledger, ASnapshotOlderThanAPairedComputeCallLeavesThatCompute) {
  Ledger l = ledger_with(1);
  const auto t0 = Clock::now();
  const auto t1 = t0 + std::chrono::milliseconds(5);
  const Allocation* a = l.allocate_memory(ids(0, {0}), t0, "k8s-a", "k").allocation;
  ASSERT_EQ(l.allocate_compute(compute_ids(40), t1), "");
  // Asked for between the two calls: the kubelet had recorded the memory only.
  l.reconcile({holding("p", "c", ids(0, {0}))}, t0);
  EXPECT_EQ(a->compute_percent, 40u);
  // Asked for after: PodResources has the last word.
  l.reconcile({holding("p", "c", ids(0, {0}))}, t1 + std::chrono::milliseconds(1));
  EXPECT_EQ(a->compute_percent, 0u);
}

}  // namespace
}  // namespace cuslice::device_plugin
