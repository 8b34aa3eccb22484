// Allocate calls (device_plugin/allocate_request.h): one tenant per memory call, the same one
// for a repeat, and refusals that name the request and each GPU's free memory or compute.
#include <gtest/gtest.h>

#include "tests/device_plugin/ledger_test_support.h"

namespace cuslice::device_plugin {
namespace {

TEST(Ledger, AllocateMakesOneTenantPerCallAndAnswersARepeatTheSame) {
  Ledger l = ledger_with(2);
  const auto now = Clock::now();
  auto first = l.allocate_memory(ids(1, {0, 1, 2}), now, "k8s-a", "key-a");
  ASSERT_TRUE(first.allocation) << first.error;
  EXPECT_TRUE(first.created);
  EXPECT_EQ(first.allocation->memory_bytes(), 3 * GiB);
  EXPECT_EQ(first.allocation->gpu, 1u);
  auto again = l.allocate_memory(ids(1, {2, 1, 0}), now, "k8s-b", "key-b");
  ASSERT_TRUE(again.allocation);
  EXPECT_FALSE(again.created);
  EXPECT_EQ(again.allocation->tenant, "k8s-a");
  EXPECT_EQ(l.used_units(1), (std::set<uint32_t>{0, 1, 2}));
}

TEST(Ledger, MemoryOnTwoGpusIsRefusedNamingTheRequestAndEachGpusFreeMemory) {
  Ledger l = ledger_with(2);
  ASSERT_TRUE(l.allocate_memory(ids(0, {0, 1, 2, 3, 4, 5}), Clock::now(), "k8s-a", "k").allocation);
  std::vector<std::string> request = ids(0, {6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
  for (uint32_t u = 0; u < 10; ++u) request.push_back(memory_id(uuid(1), u));
  const auto refused = l.allocate_memory(request, Clock::now(), "k8s-b", "k");
  EXPECT_FALSE(refused.allocation);
  EXPECT_NE(refused.error.find("20 GiB asked for"), std::string::npos) << refused.error;
  EXPECT_NE(refused.error.find("GPU 0 (" + uuid(0) + "): 10 GiB free of 16 GiB"), std::string::npos) << refused.error;
  EXPECT_NE(refused.error.find("GPU 1 (" + uuid(1) + "): 16 GiB free of 16 GiB"), std::string::npos) << refused.error;
  EXPECT_EQ(l.allocations().size(), 1u);
}

TEST(Ledger, AllocateRefusesIdsItNeverAdvertised) {
  Ledger l = ledger_with(1);
  EXPECT_NE(l.allocate_memory({"GPU-unknown-m0"}, Clock::now(), "t", "k").error, "");
  EXPECT_NE(l.allocate_memory({"c3"}, Clock::now(), "t", "k").error, "");
  EXPECT_NE(l.allocate_memory({}, Clock::now(), "t", "k").error, "");
  EXPECT_EQ(l.allocate_compute({"c0", "c99"}, Clock::now()), "");
  EXPECT_NE(l.allocate_compute({"c100"}, Clock::now()), "");  // one GPU: c0 to c99
  EXPECT_NE(l.allocate_compute({memory_id(uuid(0), 0)}, Clock::now()), "");
}

TEST(Ledger, ComputeOverOneGpuIsRefusedSayingWhatToDo) {
  Ledger l = ledger_with(2);
  const std::string error = l.allocate_compute(compute_ids(150), Clock::now());
  EXPECT_NE(error.find("cuslice.io/gpu-compute: 150% asked for, but a container gets at most one GPU, 100%"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("one container per GPU"), std::string::npos) << error;
  EXPECT_EQ(l.allocate_compute(compute_ids(100), Clock::now()), "");
}

TEST(Ledger, ComputeNoGpuHasFreeIsRefusedNamingEachGpusFreeCompute) {
  Ledger l = ledger_with(2);
  const auto t = Clock::now();
  TestKubelet kubelet{l};
  ASSERT_EQ(kubelet.admit("a", 1, 70, true, t), 0);
  ASSERT_EQ(kubelet.admit("c", 1, 0, true, t), 1);  // memory only: 1% of its GPU
  ASSERT_EQ(kubelet.admit("b", 1, 70, true, t), 1);
  const std::string error = l.allocate_compute(compute_ids(31, 140), t);
  EXPECT_NE(error.find("cuslice.io/gpu-compute: 31% asked for, but no GPU of this node has that much compute free; "
                       "free compute per GPU: GPU 0 (" + uuid(0) + "): 30%; GPU 1 (" + uuid(1) + "): 29%"),
            std::string::npos)
      << error;
  EXPECT_EQ(l.allocate_compute(compute_ids(30, 140), t), "");
}

}  // namespace
}  // namespace cuslice::device_plugin
