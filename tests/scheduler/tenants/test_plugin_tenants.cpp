// The device plugin's tenants in the daemon (scheduler/tenants/plugin_tenants.h): what the plugin
// may ask, and who may join what it made.
#include "scheduler/tenants/plugin_tenants.h"

#include <gtest/gtest.h>

#include <cstring>

namespace cuslice {
namespace {

constexpr uint64_t GiB = uint64_t{1} << 30;
const std::string kKey = "0123456789abcdef0123456789abcdef";
const std::string kPod = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_0000_1111_2222_333344445555.slice";

wire::PluginTenant spec(const std::string& name, uint64_t memory = 8 * GiB, uint32_t share_ppm = 300'000,
                        const std::string& key = kKey) {
  wire::PluginTenant t;
  std::strncpy(t.name, name.c_str(), sizeof t.name - 1);
  std::strncpy(t.key, key.c_str(), sizeof t.key - 1);
  t.gpu = 2;
  t.memory_bytes = memory;
  t.share_ppm = share_ppm;
  return t;
}

Config file_with(const std::string& tenant) {
  Config c;
  c.tenants.push_back(TenantConfig{});
  c.tenants.back().name = tenant;
  return c;
}

TEST(PluginTenants, ApplyCreatesThenUpdatesOnlyWhatMayChange) {
  PluginTenants p;
  const Config file;
  auto out = p.apply(spec("k8s-a"), file);
  EXPECT_TRUE(out.ok && out.changed) << out.message;
  out = p.apply(spec("k8s-a"), file);
  EXPECT_TRUE(out.ok);
  EXPECT_FALSE(out.changed);
  wire::PluginTenant linked = spec("k8s-a", 8 * GiB, 250'000);
  std::strcpy(linked.pod_namespace, "team");
  out = p.apply(linked, file);
  EXPECT_TRUE(out.ok && out.changed);
  EXPECT_EQ(p.workloads().at("k8s-a").pod_namespace, "team");
  EXPECT_FALSE(p.apply(spec("k8s-a", 9 * GiB), file).ok);  // memory is fixed
  EXPECT_FALSE(p.apply(spec("k8s-a", 8 * GiB, 300'000, "ffffffffffffffffffff"), file).ok);  // so is the key
  EXPECT_EQ(p.list().size(), 1u);
}

TEST(PluginTenants, ApplyRefusesWhatCouldNotBeATenant) {
  PluginTenants p;
  EXPECT_FALSE(p.apply(spec("batch"), file_with("batch")).ok);  // the file's name
  EXPECT_FALSE(p.apply(spec("bad name"), {}).ok);
  EXPECT_FALSE(p.apply(spec("k8s-a", 0), {}).ok);
  EXPECT_FALSE(p.apply(spec("k8s-a", GiB, 1'000'001), {}).ok);
  EXPECT_FALSE(p.apply(spec("k8s-a", GiB, 300'000, "short"), {}).ok);
  EXPECT_FALSE(p.apply(spec("k8s-a", GiB, 300'000, "has:colon-0123456789"), {}).ok);
  wire::PluginTenant capped_below_share = spec("k8s-a");
  capped_below_share.limit_ppm = 100'000;
  EXPECT_FALSE(p.apply(capped_below_share, {}).ok);
  wire::PluginTenant far_gpu = spec("k8s-a");
  far_gpu.gpu = shm::kMaxGpus;
  EXPECT_FALSE(p.apply(far_gpu, {}).ok);
  EXPECT_EQ(p.size(), 0u);
}

TEST(PluginTenants, ATenantOnSeveralGpusIsCheckedAndAppliedOnEach) {
  PluginTenants p;
  wire::PluginTenant pair = spec("k8s-pair", 8 * GiB, 600'000);
  pair.gpu_mask = 0b1100;  // GPUs 2 and 3
  ASSERT_TRUE(p.apply(pair, {}).ok);
  wire::PluginTenant on_three = spec("k8s-b", GiB, 500'000);
  on_three.gpu = 3;
  EXPECT_FALSE(p.apply(on_three, {}).ok);  // 60% + 50% of GPU 3
  on_three.share_ppm = 400'000;
  EXPECT_TRUE(p.apply(on_three, {}).ok);
  wire::PluginTenant moved = pair;
  moved.gpu_mask = 0b0110;
  EXPECT_FALSE(p.apply(moved, {}).ok);  // GPUs are fixed
  wire::PluginTenant without_its_gpu = spec("k8s-c");
  without_its_gpu.gpu_mask = 0b1;  // leaves out GPU 2
  EXPECT_FALSE(p.apply(without_its_gpu, {}).ok);
  wire::PluginTenant too_far = spec("k8s-c");
  too_far.gpu_mask = (1u << shm::kMaxGpus) | 0b100;
  EXPECT_FALSE(p.apply(too_far, {}).ok);
  Config config;
  p.append_to(config);
  ASSERT_EQ(config.tenants.size(), 2u);
  const TenantConfig& applied = config.tenants[config.tenants[0].name == "k8s-pair" ? 0 : 1];
  EXPECT_EQ(applied.gpu_mask, 0b1100u);
  EXPECT_TRUE(applied.on_gpu(2) && applied.on_gpu(3) && !applied.on_gpu(1));
}

TEST(PluginTenants, JoiningNeedsTheCredentialAndThenThePodOfTheFirstProcess) {
  PluginTenants p;
  ASSERT_TRUE(p.apply(spec("k8s-a"), {}).ok);
  EXPECT_FALSE(p.check_join("k8s-a", kPod + "/cri-containerd-1.scope").ok);
  EXPECT_TRUE(p.check_join("k8s-a", kPod + "/cri-containerd-1.scope").plugin);
  EXPECT_FALSE(p.check_join("k8s-a:" + std::string(32, '0'), kPod + "/cri-containerd-1.scope").ok);
  PluginJoin join = p.check_join("k8s-a:" + kKey, kPod + "/cri-containerd-1.scope");
  ASSERT_TRUE(join.ok) << join.reason;
  EXPECT_EQ(join.tenant, "k8s-a");
  p.joined("k8s-a", kPod + "/cri-containerd-1.scope");
  // Another container of the pod (or the same container restarted): yes. Another pod: no.
  EXPECT_TRUE(p.check_join("k8s-a:" + kKey, kPod + "/cri-containerd-2.scope").ok);
  join = p.check_join("k8s-a:" + kKey,
                      "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod99999999_0000_1111_2222_333344445555.slice/x.scope");
  EXPECT_FALSE(join.ok);
  EXPECT_NE(join.reason.find("belongs to the pod of cgroup " + kPod), std::string::npos) << join.reason;
}

TEST(PluginTenants, AFileTenantsNameIsNotThePluginsBusiness) {
  PluginTenants p;
  EXPECT_FALSE(p.check_join("training", "/").plugin);
  EXPECT_FALSE(p.check_join("", "/").plugin);
  // A credential for a tenant the plugin removed: refused here, with a reason.
  const PluginJoin gone = p.check_join("k8s-gone:" + kKey, "/");
  EXPECT_TRUE(gone.plugin);
  EXPECT_FALSE(gone.ok);
  EXPECT_NE(gone.reason.find("removed"), std::string::npos);
}

TEST(PluginTenants, RemoveIsIdempotent) {
  PluginTenants p;
  p.apply(spec("k8s-a"), {});
  EXPECT_TRUE(p.remove("k8s-a").changed);
  const PluginOutcome again = p.remove("k8s-a");
  EXPECT_TRUE(again.ok);
  EXPECT_FALSE(again.changed);
}

TEST(PluginTenants, AppendedBesideTheFilesTenantsWithTheirShares) {
  PluginTenants p;
  p.apply(spec("k8s-a", 8 * GiB, 300'000), {});
  p.apply(spec("batch", 8 * GiB, 500'000), {});
  Config c = file_with("batch");  // the file took the name since: the file's wins
  p.append_to(c);
  ASSERT_EQ(c.tenants.size(), 2u);
  EXPECT_EQ(c.tenants[1].name, "k8s-a");
  EXPECT_EQ(c.tenants[1].memory->bytes, 8 * GiB);
  EXPECT_FALSE(c.tenants[1].allow_env);
  EXPECT_TRUE(c.tenants[1].match.empty());
  // On its own GPU only, with the share the plugin gave; the file's tenant splits the rest.
  EXPECT_EQ(c.tenants[1].gpu_mask, 1u << 2);
  const std::vector<double> on_its_gpu = c.effective_shares(2);
  EXPECT_DOUBLE_EQ(on_its_gpu[1], 30.0);
  EXPECT_DOUBLE_EQ(on_its_gpu[0], 70.0);
  const std::vector<double> elsewhere = c.effective_shares(0);
  EXPECT_DOUBLE_EQ(elsewhere[0], 100.0);
  EXPECT_DOUBLE_EQ(elsewhere[1], kMinImplicitShare);
}

TEST(PluginTenants, EachGpusSharesFitInItsTime) {
  PluginTenants p;
  EXPECT_TRUE(p.apply(spec("k8s-a", 4 * GiB, 600'000), {}).ok);
  // Another 60% on the same GPU is over; on another GPU it fits.
  const PluginOutcome over = p.apply(spec("k8s-b", 4 * GiB, 600'000), {});
  EXPECT_FALSE(over.ok);
  EXPECT_NE(over.message.find("GPU 2 has 60% of its time given to other tenants"), std::string::npos) << over.message;
  wire::PluginTenant b = spec("k8s-b", 4 * GiB, 600'000);
  b.gpu = 3;
  EXPECT_TRUE(p.apply(b, {}).ok);
  // The file's tenants count on their GPUs: a 50% tenant of every GPU leaves 50% on GPU 5.
  Config file = file_with("batch");
  file.tenants[0].share_percent = 50.0;
  wire::PluginTenant c = spec("k8s-c", 4 * GiB, 600'000);
  c.gpu = 5;
  EXPECT_FALSE(p.apply(c, file).ok);
  c.share_ppm = 500'000;
  EXPECT_TRUE(p.apply(c, file).ok);
  // A file tenant of GPU 0 only leaves GPU 5's time to the plugin's tenants there.
  file.tenants[0].gpu_mask = 1u;
  wire::PluginTenant d = spec("k8s-d", 4 * GiB, 600'000);
  d.gpu = 5;
  EXPECT_FALSE(p.apply(d, file).ok);  // k8s-c's 50% is there
  d.share_ppm = 500'000;
  EXPECT_TRUE(p.apply(d, file).ok);
}

TEST(PodCgroup, ThePodsOwnCgroupUnderEitherDriver) {
  EXPECT_EQ(pod_cgroup(kPod + "/cri-containerd-abc.scope"), kPod);
  EXPECT_EQ(pod_cgroup("/kubepods/burstable/pod1b2c3d4e-0000-1111-2222-333344445555/0123abcd"),
            "/kubepods/burstable/pod1b2c3d4e-0000-1111-2222-333344445555");
  EXPECT_EQ(pod_cgroup("/user.slice/user-1000.slice/session-3.scope"), "/user.slice/user-1000.slice/session-3.scope");
}

}  // namespace
}  // namespace cuslice

namespace cuslice {
namespace {

TEST(PluginTenants, AContainerOfMemoryOnlyGetsWhatItsGpusSharesLeave) {
  PluginTenants p;
  ASSERT_TRUE(p.apply(spec("k8s-a", 4 * GiB, 600'000), {}).ok);
  ASSERT_TRUE(p.apply(spec("k8s-b", 4 * GiB, 0), {}).ok);
  ASSERT_TRUE(p.apply(spec("k8s-c", 4 * GiB, 0), {}).ok);
  Config c;
  p.append_to(c);
  ASSERT_EQ(c.tenants.size(), 3u);
  EXPECT_EQ(c.effective_shares(2), (std::vector<double>{60, 20, 20}));
  // Their 1% each still counts: 99% more does not fit GPU 2.
  EXPECT_FALSE(p.apply(spec("k8s-d", 4 * GiB, 390'000), {}).ok);
  EXPECT_TRUE(p.apply(spec("k8s-d", 4 * GiB, 380'000), {}).ok);
}

}  // namespace
}  // namespace cuslice
