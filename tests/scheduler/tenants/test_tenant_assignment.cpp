#include "scheduler/tenants/tenant_assignment.h"

#include <gtest/gtest.h>

namespace cuslice {
namespace {

Config config() {
  const ConfigResult r = parse_config(R"(tenants:
  - name: inference
    allow_env: false
    match: {uid: 1001}
  - name: training
    match: {cgroup: /kubepods/train}
  - name: open
    allow_env: true
)", "test.yaml");
  EXPECT_TRUE(r.ok());
  return r.config;
}

PeerIdentity peer(uid_t uid, std::string cgroup = "/user.slice") { return {1234, uid, 100, std::move(cgroup)}; }

TEST(TenantAssignment, EnvironmentChoosesAnOpenTenant) {
  EXPECT_EQ(assign_tenant(config(), peer(5), "open").tenant, 2);
}

TEST(TenantAssignment, UnknownTenantIsRefusedWithItsName) {
  const Assignment a = assign_tenant(config(), peer(5), "opne");
  EXPECT_EQ(a.tenant, -1);
  EXPECT_NE(a.reason.find("`opne`"), std::string::npos) << a.reason;
}

TEST(TenantAssignment, AllowEnvFalseRefusesSelfSelection) {
  const Assignment a = assign_tenant(config(), peer(5), "inference");
  EXPECT_EQ(a.tenant, -1);
  EXPECT_NE(a.reason.find("allow_env: false"), std::string::npos) << a.reason;
  EXPECT_EQ(assign_tenant(config(), peer(1001), "inference").tenant, 0) << "its match rule holds";
}

TEST(TenantAssignment, ATenantThatSaysNothingIsNotChosenByName) {
  const Assignment a = assign_tenant(config(), peer(5), "training");
  EXPECT_EQ(a.tenant, -1) << "allow_env is false unless the file says true";
  EXPECT_NE(a.reason.find("allow_env: false"), std::string::npos) << a.reason;
  EXPECT_EQ(assign_tenant(config(), peer(5, "/kubepods/train"), "training").tenant, 1) << "its match rule holds";
}

TEST(TenantAssignment, MatchRules) {
  EXPECT_EQ(assign_tenant(config(), peer(1001), "").tenant, 0);
  EXPECT_EQ(assign_tenant(config(), peer(5, "/kubepods/train"), "").tenant, 1);
  EXPECT_EQ(assign_tenant(config(), peer(5, "/kubepods/train/pod7"), "").tenant, 1);
  EXPECT_EQ(assign_tenant(config(), peer(5, "/kubepods/training"), "").tenant, -1) << "a path prefix, not a string prefix";
}

TEST(TenantAssignment, NoTenantIsRefusedUnlessThereIsADefault) {
  Config c = config();
  const Assignment a = assign_tenant(c, peer(5), "");
  EXPECT_EQ(a.tenant, -1);
  EXPECT_NE(a.reason.find("no tenant for this process"), std::string::npos) << a.reason;
  c.scheduler.default_tenant = "open";
  EXPECT_EQ(assign_tenant(c, peer(5), "").tenant, 2);
}

}  // namespace
}  // namespace cuslice
