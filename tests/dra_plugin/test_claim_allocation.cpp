// What a ResourceClaim's allocation gives this node, and the tenant that makes it so
// (dra_plugin/claim_allocation.h), rule by rule.
#include "dra_plugin/claim_allocation.h"

#include <gtest/gtest.h>

namespace cuslice::dra {
namespace {

using nlohmann::json;
constexpr uint64_t GiB = uint64_t{1} << 30;

json result(const std::string& device, json consumed = nullptr, const std::string& pool = "node-a") {
  json r = {{"request", "gpu"}, {"driver", "gpu.cuslice.io"}, {"pool", pool}, {"device", device}};
  if (!consumed.is_null()) r["consumedCapacity"] = consumed;
  return r;
}

json claim(json results) {
  return {{"metadata", {{"name", "c"}, {"namespace", "ns"}, {"uid", "u-1"}}},
          {"status",
           {{"allocation", {{"devices", {{"results", results}}}}},
            {"reservedFor", json::array({{{"resource", "pods"}, {"name", "p"}, {"uid", "x"}}})}}}};
}

std::vector<node::GpuInfo> gpus() {
  return {{0, "GPU-0", "H100", 80 * GiB, 0, std::nullopt}, {1, "GPU-1", "H100", 80 * GiB, 1, std::nullopt}};
}

TEST(ClaimAllocation, TakesThisDriversDevicesInThisPool) {
  json results = json::array({result("gpu-0", {{"memory", "8Gi"}, {"compute", "30"}}),
                              result("gpu-1", nullptr, "node-b")});
  results.push_back(result("gpu-1"));
  results.back()["driver"] = "gpu.nvidia.com";
  results[0]["shareID"] = "s-1";
  std::string why;
  const auto a = allocation_of(claim(results), "u-1", "node-a", why);
  ASSERT_TRUE(a) << why;
  ASSERT_EQ(a->devices.size(), 1u);
  EXPECT_EQ(a->devices[0].device, "gpu-0");
  EXPECT_EQ(a->devices[0].share_id, "s-1");
  EXPECT_EQ(a->devices[0].memory, 8 * GiB);
  EXPECT_EQ(a->devices[0].compute, 30u);
  EXPECT_EQ(a->pod, "p");
}

TEST(ClaimAllocation, AClaimSharedByPodsIsLabelledWithTheFirst) {
  json c = claim(json::array({result("gpu-0")}));
  c["status"]["reservedFor"] = json::array({{{"resource", "deployments"}, {"name", "d"}, {"uid", "w"}},
                                            {{"resource", "pods"}, {"name", "p-1"}, {"uid", "x"}},
                                            {{"resource", "pods"}, {"name", "p-2"}, {"uid", "y"}}});
  std::string why;
  const auto a = allocation_of(c, "u-1", "node-a", why);
  ASSERT_TRUE(a) << why;
  EXPECT_EQ(a->pod, "p-1");
}

TEST(ClaimAllocation, RefusesAnotherClaimAnUnallocatedOneAndBadAmounts) {
  std::string why;
  EXPECT_FALSE(allocation_of(claim(json::array()), "u-2", "node-a", why));
  EXPECT_NE(why.find("u-2"), std::string::npos);
  json pending = claim(json::array());
  pending.erase("status");
  EXPECT_FALSE(allocation_of(pending, "u-1", "node-a", why));
  EXPECT_NE(why.find("not allocated"), std::string::npos);
  EXPECT_FALSE(allocation_of(claim(json::array({result("gpu-0", {{"memory", "lots"}})})), "u-1", "node-a", why));
  EXPECT_NE(why.find("lots"), std::string::npos);
  EXPECT_FALSE(allocation_of(claim(json::array({result("gpu-0", {{"memory", 8}})})), "u-1", "node-a", why));
  EXPECT_FALSE(allocation_of(json::array(), "u-1", "node-a", why));
  EXPECT_FALSE(allocation_of(json("text"), "u-1", "node-a", why));
}

TEST(ClaimAllocation, ATenantHasTheConsumedAmounts) {
  SliceOptions o;
  std::string why;
  const auto plan = plan_tenant({{"gpu", "node-a", "gpu-1", "s", 8 * GiB, 30}}, gpus(), o, why);
  ASSERT_TRUE(plan) << why;
  EXPECT_EQ(plan->gpus, std::vector<uint32_t>{1});
  EXPECT_EQ(plan->memory_bytes, 8 * GiB);
  EXPECT_EQ(plan->compute_percent, 30u);
}

TEST(ClaimAllocation, Rule1ADeviceWithoutConsumedCapacityIsWhole) {
  SliceOptions o;
  o.reserve_memory = GiB;
  std::string why;
  const auto plan = plan_tenant({{"gpu", "node-a", "gpu-0", std::nullopt, std::nullopt, std::nullopt}}, gpus(), o, why);
  ASSERT_TRUE(plan) << why;
  EXPECT_EQ(plan->memory_bytes, 79 * GiB);
  EXPECT_EQ(plan->compute_percent, 100u);
}

TEST(ClaimAllocation, Rule2OneShareOfAGpuAndOnlyGpusOfThisNode) {
  SliceOptions o;
  std::string why;
  EXPECT_FALSE(plan_tenant({{"a", "node-a", "gpu-0", "s1", GiB, 10}, {"b", "node-a", "gpu-0", "s2", GiB, 10}}, gpus(),
                           o, why));
  EXPECT_NE(why.find("twice"), std::string::npos);
  EXPECT_FALSE(plan_tenant({{"a", "node-a", "gpu-7", std::nullopt, GiB, 10}}, gpus(), o, why));
  EXPECT_NE(why.find("gpu-7"), std::string::npos);
  EXPECT_FALSE(plan_tenant({}, gpus(), o, why));
}

TEST(ClaimAllocation, Rule3SeveralGpusMustHaveTheSameAmounts) {
  SliceOptions o;
  std::string why;
  const auto plan = plan_tenant({{"g", "node-a", "gpu-1", std::nullopt, 40 * GiB, 50},
                                 {"g", "node-a", "gpu-0", std::nullopt, 40 * GiB, 50}},
                                gpus(), o, why);
  ASSERT_TRUE(plan) << why;
  EXPECT_EQ(plan->gpus, (std::vector<uint32_t>{0, 1}));
  EXPECT_FALSE(plan_tenant({{"g", "node-a", "gpu-0", std::nullopt, 40 * GiB, 50},
                            {"g", "node-a", "gpu-1", std::nullopt, 20 * GiB, 50}},
                           gpus(), o, why));
  EXPECT_NE(why.find("same amounts"), std::string::npos);
}

TEST(ClaimAllocation, Rule4ComputeIsAPercentAndMemoryIsSome) {
  SliceOptions o;
  std::string why;
  EXPECT_FALSE(plan_tenant({{"g", "node-a", "gpu-0", std::nullopt, GiB, 0}}, gpus(), o, why));
  EXPECT_FALSE(plan_tenant({{"g", "node-a", "gpu-0", std::nullopt, GiB, 101}}, gpus(), o, why));
  EXPECT_FALSE(plan_tenant({{"g", "node-a", "gpu-0", std::nullopt, 0, 10}}, gpus(), o, why));
}

}  // namespace
}  // namespace cuslice::dra
