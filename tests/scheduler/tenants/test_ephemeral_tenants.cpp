// Tenants from `cuslice run` (ensure-tenant): the same rules as the YAML, and idempotence.
#include "scheduler/tenants/ephemeral_tenants.h"

#include <gtest/gtest.h>

#include <cstring>

namespace cuslice {
namespace {

wire::TenantSpec spec(const char* name, uint32_t share_ppm = 0) {
  wire::TenantSpec s;
  std::strncpy(s.name, name, sizeof s.name - 1);
  s.share_ppm = share_ppm;
  return s;
}

TEST(EphemeralTenantsTest, AddsANewTenant) {
  Config config;
  wire::TenantSpec s = spec("train", 300'000);
  s.priority = 2;
  s.limit_ppm = 500'000;
  s.memory_bytes = 1 << 30;
  const EnsureOutcome out = ensure_tenant(config, s);
  ASSERT_TRUE(out.ok) << out.message;
  EXPECT_TRUE(out.added);
  ASSERT_EQ(config.tenants.size(), 1u);
  const TenantConfig& t = config.tenants[0];
  EXPECT_EQ(t.name, "train");
  EXPECT_EQ(t.priority, Priority::kHigh);
  EXPECT_DOUBLE_EQ(*t.share_percent, 30.0);
  EXPECT_DOUBLE_EQ(t.limit_percent, 50.0);
  ASSERT_TRUE(t.memory);
  EXPECT_EQ(t.memory->bytes, uint64_t{1} << 30);
}

TEST(EphemeralTenantsTest, TheSameTenantAgainIsJoinedNotAdded) {
  Config config;
  ASSERT_TRUE(ensure_tenant(config, spec("a", 300'000)).ok);
  const EnsureOutcome again = ensure_tenant(config, spec("a", 300'000));
  EXPECT_TRUE(again.ok);
  EXPECT_FALSE(again.added);
  EXPECT_EQ(config.tenants.size(), 1u);
}

TEST(EphemeralTenantsTest, TheSameNameWithOtherParametersIsRefusedAndSaysWhich) {
  Config config;
  ASSERT_TRUE(ensure_tenant(config, spec("a", 300'000)).ok);
  const EnsureOutcome out = ensure_tenant(config, spec("a", 500'000));
  EXPECT_FALSE(out.ok);
  EXPECT_NE(out.message.find("share 30% (asked: 50%)"), std::string::npos) << out.message;
  EXPECT_DOUBLE_EQ(*config.tenants[0].share_percent, 30.0);
}

TEST(EphemeralTenantsTest, SharesMayNotExceedTheWholeGpu) {
  Config config;
  ASSERT_TRUE(ensure_tenant(config, spec("a", 700'000)).ok);
  const EnsureOutcome out = ensure_tenant(config, spec("b", 400'000));
  EXPECT_FALSE(out.ok);
  EXPECT_NE(out.message.find("110%"), std::string::npos) << out.message;
  EXPECT_EQ(config.tenants.size(), 1u);
}

TEST(EphemeralTenantsTest, RefusesWhatAFileCouldNotSay) {
  Config config;
  EXPECT_FALSE(ensure_tenant(config, spec("has space")).ok);
  EXPECT_FALSE(ensure_tenant(config, spec("")).ok);
  wire::TenantSpec low_limit = spec("a", 500'000);
  low_limit.limit_ppm = 400'000;
  EXPECT_FALSE(ensure_tenant(config, low_limit).ok);
  wire::TenantSpec both = spec("b");
  both.memory_bytes = 1;
  both.memory_ppm = 1;
  EXPECT_FALSE(ensure_tenant(config, both).ok);
  wire::TenantSpec priority = spec("c");
  priority.priority = 3;
  EXPECT_FALSE(ensure_tenant(config, priority).ok);
  EXPECT_TRUE(config.tenants.empty());
}

}  // namespace
}  // namespace cuslice

namespace cuslice {
namespace {

wire::TenantSpec on_gpus(const char* name, uint32_t share_ppm, uint32_t mask) {
  wire::TenantSpec s{};
  std::strncpy(s.name, name, sizeof s.name - 1);
  s.share_ppm = share_ppm;
  s.gpu_mask = mask;
  return s;
}

TEST(EphemeralTenantsTest, SharesAreCountedOnEachGpuATenantUses) {
  Config config;
  // 70% of GPU 1 and 50% of GPU 0: each GPU has room.
  ASSERT_TRUE(ensure_tenant(config, on_gpus("a", 700'000, 1u << 1)).ok);
  ASSERT_TRUE(ensure_tenant(config, on_gpus("c", 500'000, 1u << 0)).ok);
  ASSERT_TRUE(ensure_tenant(config, on_gpus("b", 300'000, 1u << 1)).ok);
  EXPECT_EQ(config.tenants[0].gpu_mask, 1u << 1);
  // GPU 1 is full; a tenant of every GPU is over there, one of GPU 0 only is not.
  const EnsureOutcome over = ensure_tenant(config, on_gpus("d", 100'000, 0));
  EXPECT_FALSE(over.ok);
  EXPECT_EQ(over.message, "the shares of the tenants on GPU 1 would add up to 110%, more than 100%");
  EXPECT_TRUE(ensure_tenant(config, on_gpus("e", 500'000, 1u << 0)).ok);
  EXPECT_FALSE(ensure_tenant(config, on_gpus("f", 100'000, 1u << 0)).ok);
}

TEST(EphemeralTenantsTest, TheSameNameOnOtherGpusIsRefusedAndSaysWhich) {
  Config config;
  ASSERT_TRUE(ensure_tenant(config, on_gpus("a", 300'000, 0b11)).ok);
  EXPECT_TRUE(ensure_tenant(config, on_gpus("a", 300'000, 0b11)).ok);
  const EnsureOutcome out = ensure_tenant(config, on_gpus("a", 300'000, 0b10));
  EXPECT_FALSE(out.ok);
  EXPECT_NE(out.message.find("GPUs 0,1 (asked: 1)"), std::string::npos) << out.message;
  EXPECT_FALSE(ensure_tenant(config, on_gpus("z", 0, 1u << 16)).ok);  // beyond the segment's GPUs
}

}  // namespace
}  // namespace cuslice
