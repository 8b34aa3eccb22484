// UsageWatchdog: which tenants the driver's per-process figures put over their quota, and
// which GPU processes no registered process accounts for.
#include "scheduler/usage/usage_watchdog.h"

#include <gtest/gtest.h>

namespace cuslice {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

WatchedTenant tenant(std::string name, std::optional<uint64_t> quota, bool kill = false) {
  return {std::move(name), {quota, quota}, kill};
}

TEST(UsageWatchdog, WithinQuotaAndAllowanceIsNoViolation) {
  UsageWatchdog w({.allowance_per_process = 64 * kMiB});
  const auto v = w.check({{{100, 4 * kGiB + 64 * kMiB}, {101, 0}}}, {{100, 0, {4 * kGiB}}, {101, 0, {0}}},
                         {tenant("a", 4 * kGiB)});
  EXPECT_TRUE(v.empty());
}

TEST(UsageWatchdog, OverQuotaNamesTheTenantAndTheProcessHoldingMostBeyondItsCharge) {
  UsageWatchdog w({.allowance_per_process = 64 * kMiB});
  // Two processes of tenant 1 on GPU 1: 2 GiB charged and held, and 3 GiB held with 1 GiB charged.
  const std::vector<std::vector<DriverProcess>> driver{{}, {{200, 2 * kGiB}, {201, 3 * kGiB}}};
  const std::vector<RegisteredProcess> reg{{200, 1, {0, 2 * kGiB}}, {201, 1, {0, 1 * kGiB}}};
  const auto v = w.check(driver, reg, {tenant("a", 8 * kGiB), tenant("b", 4 * kGiB, true)});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].kind, Violation::Kind::kOverQuota);
  EXPECT_EQ(v[0].gpu, 1u);
  EXPECT_EQ(v[0].tenant, 1u);
  EXPECT_EQ(v[0].used_bytes, 5 * kGiB);
  EXPECT_EQ(v[0].quota_bytes, 4 * kGiB + 2 * 64 * kMiB);
  EXPECT_EQ(v[0].pid, 201);
  EXPECT_TRUE(v[0].kill);
  EXPECT_TRUE(v[0].is_new);
  // Still over at the next check: the same violation, not new.
  const auto again = w.check(driver, reg, {tenant("a", 8 * kGiB), tenant("b", 4 * kGiB, true)});
  ASSERT_EQ(again.size(), 1u);
  EXPECT_FALSE(again[0].is_new);
}

TEST(UsageWatchdog, NoQuotaIsNeverOver) {
  UsageWatchdog w;
  EXPECT_TRUE(w.check({{{300, 70 * kGiB}}}, {{300, 0, {0}}}, {tenant("free", std::nullopt)}).empty());
}

TEST(UsageWatchdog, AProcessNobodyRegisteredIsReportedFromItsSecondCheck) {
  UsageWatchdog w;
  const std::vector<std::vector<DriverProcess>> driver{{{400, 1 * kGiB}, {401, 1 * kGiB}}};
  const std::vector<RegisteredProcess> reg{{401, 0, {1 * kGiB}}};
  EXPECT_TRUE(w.check(driver, reg, {tenant("a", 2 * kGiB)}).empty()) << "first sighting: may be registering";
  const auto v = w.check(driver, reg, {tenant("a", 2 * kGiB)});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].kind, Violation::Kind::kUnhooked);
  EXPECT_EQ(v[0].pid, 400);
  EXPECT_FALSE(v[0].tenant.has_value());
  EXPECT_TRUE(v[0].is_new);
  EXPECT_FALSE(w.check(driver, reg, {tenant("a", 2 * kGiB)})[0].is_new);
  // It registered late: no longer reported.
  EXPECT_TRUE(w.check(driver, {{400, 0, {1 * kGiB}}, {401, 0, {1 * kGiB}}}, {tenant("a", 4 * kGiB)}).empty());
}

TEST(UsageWatchdog, AProcessSeenOnceThenGoneIsNeverReported) {
  UsageWatchdog w;
  EXPECT_TRUE(w.check({{{500, kGiB}}}, {}, {}).empty());
  EXPECT_TRUE(w.check({{}}, {}, {}).empty());
  EXPECT_TRUE(w.check({{{500, kGiB}}}, {}, {}).empty()) << "seen once again, after a gap";
}

TEST(UsageWatchdog, ATenantIndexOutOfRangeCountsAsRegisteredToNoTenant) {
  UsageWatchdog w;
  const std::vector<std::vector<DriverProcess>> driver{{{600, 9 * kGiB}}};
  const std::vector<RegisteredProcess> reg{{600, 63, {0}}};
  EXPECT_TRUE(w.check(driver, reg, {tenant("a", kGiB)}).empty());
  EXPECT_TRUE(w.check(driver, reg, {tenant("a", kGiB)}).empty());
}

TEST(UsageWatchdog, HugeQuotaDoesNotOverflowTheBound) {
  UsageWatchdog w;
  EXPECT_TRUE(w.check({{{700, UINT64_MAX - 1}}}, {{700, 0, {0}}}, {tenant("a", UINT64_MAX - 10)}).empty());
}

}  // namespace
}  // namespace cuslice
