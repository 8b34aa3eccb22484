// A GPU's spatial group as one tenant of the token policy: its members hidden, the group's
// share their shares together and its priority their highest, its demand any member's; and
// the policy then dividing the GPU between the group and a time-sliced tenant by share.
#include "scheduler/scheduling/spatial_group.h"

#include <gtest/gtest.h>

namespace cuslice {
namespace {

using namespace std::chrono_literals;
using Nanos = TokenPolicy::Nanos;

TenantParams member(double share, int priority = 1) { return {true, priority, share, 1.0, true}; }
TenantParams sliced(double share, int priority = 1) { return {true, priority, share, 1.0, false}; }

std::vector<TenantParams> entries(std::vector<TenantParams> first) {
  first.resize(shm::kMaxTenants);
  return first;
}

TEST(SpatialGroup, MembersBecomeOneTenantWithTheirSharesAndTopPriority) {
  const std::vector<TenantParams> t = entries({member(0.2, 0), sliced(0.5), member(0.3, 2)});
  EXPECT_EQ(group_members(t), 0b101u);
  const std::vector<TenantParams> p = policy_tenants(t);
  ASSERT_EQ(p.size(), kGroupEntry + 1);
  EXPECT_FALSE(p[0].present);
  EXPECT_TRUE(p[1].present);
  EXPECT_FALSE(p[2].present);
  EXPECT_TRUE(p[kGroupEntry].present);
  EXPECT_DOUBLE_EQ(p[kGroupEntry].share, 0.5);
  EXPECT_EQ(p[kGroupEntry].priority, 2);
  EXPECT_DOUBLE_EQ(p[kGroupEntry].limit, 1.0);
}

TEST(SpatialGroup, NoMemberNoGroup) {
  const std::vector<TenantParams> p = policy_tenants(entries({sliced(0.5), sliced(0.5)}));
  EXPECT_FALSE(p[kGroupEntry].present);
  EXPECT_EQ(group_members(entries({sliced(1.0)})), 0u);
}

TEST(SpatialGroup, TheGroupWantsTheGpuWhenAnyMemberDoes) {
  std::vector<TenantActivity> a(kGroupEntry + 1);
  fold_group_activity(a, 0b11);
  EXPECT_FALSE(a[kGroupEntry].demand);
  a[1] = {true, true};
  fold_group_activity(a, 0b11);
  EXPECT_TRUE(a[kGroupEntry].demand);
  EXPECT_TRUE(a[kGroupEntry].queued);
  a[1] = {};
  a[5] = {true, false};  // not a member
  fold_group_activity(a, 0b11);
  EXPECT_FALSE(a[kGroupEntry].demand);
}

// Two members of 25% each and a time-sliced tenant of 50%, all busy: the group and the
// tenant alternate, half the GPU each, charged the time they held it.
TEST(SpatialGroup, TheGroupAndATimeSlicedTenantShareTheGpuByShare) {
  const std::vector<TenantParams> t = entries({member(0.25), member(0.25), sliced(0.5)});
  TokenPolicy policy(PolicyParams{}, policy_tenants(t));
  std::vector<TenantActivity> a(kGroupEntry + 1);
  a[0] = a[1] = a[2] = {true, false};
  Nanos now{0}, group{0}, other{0};
  while (now < 20s) {
    fold_group_activity(a, group_members(t));
    const TokenPolicy::Decision d = policy.step(now, a);
    const Nanos next = std::min(d.wake_at, now + 1ms);
    if (d.holder == kGroupEntry) group += next - now;
    if (d.holder == 2) other += next - now;
    if (d.holder != kNoHolder) policy.charge(d.holder, next - now, next);
    EXPECT_NE(d.holder, 0u);  // a member never holds the token alone
    EXPECT_NE(d.holder, 1u);
    now = next;
  }
  const double share = static_cast<double>(group.count()) / static_cast<double>((group + other).count());
  EXPECT_NEAR(share, 0.5, 0.02);
}

}  // namespace
}  // namespace cuslice
