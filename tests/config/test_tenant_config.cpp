// Every kind of configuration error, each checked at its exact file:line:column, from real
// files on disk (the daemon reads files, and the file name is part of the message).
#include "config/tenant_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace cuslice {
namespace {

class TenantConfigTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (!path_.empty()) unlink(path_.c_str());
  }

  ConfigResult load(const std::string& yaml) {
    char name[] = "/tmp/cuslice-config-XXXXXX";
    const int fd = mkstemp(name);
    EXPECT_GE(fd, 0);
    close(fd);
    path_ = name;
    std::ofstream(path_) << yaml;
    return load_config_file(path_);
  }

  // The only error, as "line:column: message" with the file name checked and stripped.
  std::string only_error(const ConfigResult& r) {
    EXPECT_EQ(r.errors.size(), 1u);
    if (r.errors.empty()) return "";
    EXPECT_EQ(r.errors[0].file, path_);
    return std::to_string(r.errors[0].line) + ":" + std::to_string(r.errors[0].column) + ": " +
           r.errors[0].message;
  }

  std::string path_;
};

constexpr const char* kValid = R"(scheduler:
  quantum: 5ms
  limit_window: 2s
  lower_priority_timeslice: 150us
  gpu_memory: 80GiB
  default_tenant: batch
tenants:
  - name: inference
    priority: high
    memory: 20GiB
    compute: {share: 60%}
    allow_env: false
    match: {uid: 1001, gid: 100, cgroup: /kubepods/a}
  - name: training
    priority: low
    memory: 50%
    compute: {share: 30%, limit: 80%}
  - name: batch
    allow_env: true
)";

TEST_F(TenantConfigTest, ParsesEveryField) {
  const ConfigResult r = load(kValid);
  ASSERT_TRUE(r.ok()) << r.errors[0].to_string();
  const Config& c = r.config;
  EXPECT_EQ(c.scheduler.quantum, std::chrono::milliseconds(5));
  EXPECT_EQ(c.scheduler.limit_window, std::chrono::seconds(2));
  EXPECT_EQ(c.scheduler.lower_priority_timeslice, std::chrono::microseconds(150));
  EXPECT_EQ(c.scheduler.gpu_memory, 80ull << 30);
  EXPECT_EQ(c.scheduler.default_tenant, "batch");
  ASSERT_EQ(c.tenants.size(), 3u);
  const TenantConfig& inf = c.tenants[0];
  EXPECT_EQ(inf.name, "inference");
  EXPECT_EQ(inf.priority, Priority::kHigh);
  ASSERT_TRUE(inf.memory);
  EXPECT_EQ(inf.memory->bytes, 20ull << 30);
  EXPECT_EQ(inf.share_percent, 60.0);
  EXPECT_EQ(inf.limit_percent, 100.0);
  EXPECT_FALSE(inf.allow_env);
  EXPECT_EQ(inf.match.uid, 1001u);
  EXPECT_EQ(inf.match.gid, 100u);
  EXPECT_EQ(inf.match.cgroup_prefix, "/kubepods/a");
  const TenantConfig& tr = c.tenants[1];
  EXPECT_EQ(tr.priority, Priority::kLow);
  EXPECT_EQ(tr.memory->kind, SizeSpec::Kind::kPercent);
  EXPECT_EQ(tr.memory->percent, 50.0);
  EXPECT_EQ(tr.limit_percent, 80.0);
  EXPECT_FALSE(tr.allow_env) << "joined by name only where the file says so";
  const TenantConfig& batch = c.tenants[2];
  EXPECT_TRUE(batch.allow_env);
  EXPECT_EQ(batch.priority, Priority::kNormal);
  EXPECT_FALSE(batch.memory);
  EXPECT_TRUE(batch.match.empty());
  // batch has no share: it gets what the others leave.
  EXPECT_EQ(c.effective_shares(0), (std::vector<double>{60, 30, 10}));
  EXPECT_EQ(c.find_tenant("training"), 1);
  EXPECT_EQ(c.find_tenant("nobody"), -1);
}

TEST_F(TenantConfigTest, DefaultsWhenSchedulerSectionIsAbsent) {
  const ConfigResult r = load("tenants:\n  - name: a\n");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.config.scheduler.quantum, std::chrono::milliseconds(100));
  EXPECT_EQ(r.config.scheduler.lower_priority_timeslice, std::chrono::microseconds(200));
  EXPECT_FALSE(r.config.scheduler.default_tenant);
  EXPECT_EQ(r.config.effective_shares(0), std::vector<double>{100});
}

TEST_F(TenantConfigTest, UnknownKeyAtTopLevel) {
  EXPECT_EQ(only_error(load("tenants:\n  - name: a\nschedular: {}\n")),
            "3:1: unknown key `schedular` (expected one of: scheduler, tenants)");
}

TEST_F(TenantConfigTest, UnknownKeyInTenantAndCompute) {
  const ConfigResult r = load("tenants:\n  - name: a\n    memroy: 1GiB\n    compute: {shar: 10%}\n");
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_EQ(r.errors[0].to_string(),
            path_ + ":3:5: unknown key `memroy` (expected one of: name, priority, memory, compute, "
                    "match, allow_env, on_violation, preemptible, gpus, host_pool, spatial)");
  EXPECT_EQ(r.errors[1].to_string(),
            path_ + ":4:15: unknown key `shar` (expected one of: share, limit, sm)");
}

TEST_F(TenantConfigTest, BadMemoryUnit) {
  EXPECT_EQ(only_error(load("tenants:\n  - name: a\n    memory: 4GB2\n")),
            "3:13: bad size `4GB2` for `memory`: unknown unit; write a number and a unit: 4GiB or "
            "4Gi (4*2^30 bytes), 4096MiB, 4G or 4GB (decimal: 4*10^9 bytes), 512B, or 25%");
}

TEST_F(TenantConfigTest, BadPercentage) {
  EXPECT_EQ(only_error(load("tenants:\n  - name: a\n    compute:\n      share: 140%\n")),
            "4:14: bad percentage `140%` for `share`: a percentage is above 0% and at most 100%");
  EXPECT_EQ(only_error(load("tenants:\n  - name: a\n    compute: {limit: 0.5}\n")),
            "3:22: bad percentage `0.5` for `limit`: a percentage is written with %; write a number "
            "above 0 and at most 100 followed by %, e.g. 60% or 12.5%");
}

TEST_F(TenantConfigTest, BadDuration) {
  EXPECT_EQ(only_error(load("scheduler:\n  quantum: 20 ms\ntenants:\n  - name: a\n")),
            "2:12: bad duration `20 ms` for `quantum`: no space inside a duration; write a number "
            "and a unit: 20ms, 1.5s, 500us or 500ns");
  EXPECT_EQ(only_error(load("scheduler:\n  limit_window: 0s\ntenants:\n  - name: a\n")),
            "2:17: `limit_window` must be above zero");
  EXPECT_EQ(only_error(load("scheduler:\n  quantum: 1e30s\ntenants:\n  - name: a\n")),
            "2:12: bad duration `1e30s` for `quantum`: unknown unit; write a number and a unit: "
            "20ms, 1.5s, 500us or 500ns");
}

TEST_F(TenantConfigTest, SharesOverOneHundredPercentPointAtTheShareThatGoesOver) {
  EXPECT_EQ(only_error(load("tenants:\n"
                            "  - name: a\n    compute: {share: 60%}\n"
                            "  - name: b\n    compute: {share: 50%}\n")),
            "5:22: the tenants' shares add up to 110%, more than 100%");
}

TEST_F(TenantConfigTest, MemoryOverTheCard) {
  EXPECT_EQ(only_error(load("scheduler: {gpu_memory: 16GiB}\n"
                            "tenants:\n  - name: a\n    memory: 17GiB\n")),
            "4:13: memory `17GiB` is more than the card (`gpu_memory` is 17179869184 bytes)");
}

TEST_F(TenantConfigTest, GpuMemoryMustBeBytes) {
  EXPECT_EQ(only_error(load("scheduler: {gpu_memory: 50%}\ntenants:\n  - name: a\n")),
            "1:25: `gpu_memory` is the size of the card: write bytes, e.g. 80GiB, not a percentage");
}

TEST_F(TenantConfigTest, ZeroMemory) {
  EXPECT_EQ(only_error(load("tenants:\n  - name: a\n    memory: 0GiB\n")),
            "3:13: `memory` must be above zero");
}

TEST_F(TenantConfigTest, LimitBelowShare) {
  EXPECT_EQ(only_error(load("tenants:\n  - name: a\n    compute: {share: 50%, limit: 40%}\n")),
            "3:34: `limit` is below `share`: the tenant could never get its share");
}

TEST_F(TenantConfigTest, BadPriority) {
  EXPECT_EQ(only_error(load("tenants:\n  - name: a\n    priority: urgent\n")),
            "3:15: bad priority `urgent`: expected high, normal or low");
}

TEST_F(TenantConfigTest, MissingAndBadAndDuplicateNames) {
  EXPECT_EQ(only_error(load("tenants:\n  - priority: low\n")), "2:5: a tenant needs a `name`");
  EXPECT_EQ(only_error(load("tenants:\n  - name: a b\n")),
            "2:11: bad tenant name `a b`: 1 to 63 characters of letters, digits, '-', '_' or '.'");
  EXPECT_EQ(only_error(load("tenants:\n  - name: a\n  - name: a\n")),
            "3:11: duplicate tenant name `a`");
}

TEST_F(TenantConfigTest, BadMatchRules) {
  const ConfigResult r =
      load("tenants:\n  - name: a\n    match: {uid: alice, cgroup: kubepods, pid: 3}\n");
  ASSERT_EQ(r.errors.size(), 3u);
  EXPECT_EQ(r.errors[0].to_string(), path_ + ":3:18: bad `uid` `alice`: expected a numeric id from 0 to 4294967294");
  EXPECT_EQ(r.errors[1].to_string(),
            path_ + ":3:33: `cgroup` must be an absolute cgroup path prefix, e.g. /kubepods");
  EXPECT_EQ(r.errors[2].to_string(),
            path_ + ":3:43: unknown key `pid` (expected one of: uid, gid, cgroup)");
}

TEST_F(TenantConfigTest, BadBoolean) {
  EXPECT_EQ(only_error(load("tenants:\n  - name: a\n    allow_env: maybe\n")),
            "3:16: bad `allow_env` `maybe`: expected true or false");
}

TEST_F(TenantConfigTest, LowerPriorityTimesliceOff) {
  const ConfigResult r = load("scheduler:\n  lower_priority_timeslice: off\ntenants:\n  - name: a\n");
  ASSERT_TRUE(r.ok()) << r.errors[0].to_string();
  EXPECT_EQ(r.config.scheduler.lower_priority_timeslice, std::chrono::microseconds(0));
}

TEST_F(TenantConfigTest, UnknownDefaultTenant) {
  EXPECT_EQ(only_error(load("scheduler:\n  default_tenant: nobody\ntenants:\n  - name: a\n")),
            "2:19: `default_tenant` names `nobody`, which is not a tenant in this file");
}

TEST_F(TenantConfigTest, WrongShapes) {
  EXPECT_EQ(only_error(load("tenants: {name: a}\n")),
            "1:10: `tenants` must be a list of tenants (`- name: ...`, or `[]`)");
  EXPECT_EQ(only_error(load("- a\n- b\n")), "1:1: the top level must be a mapping of `key: value`");
  EXPECT_EQ(only_error(load("scheduler: {}\n")),
            "1:1: missing `tenants:` (a list of tenants; `[]` when the device plugin makes them all)");
  EXPECT_EQ(only_error(load("tenants:\n  - name: [a]\n")), "2:11: `name` must be a single value");
}

TEST_F(TenantConfigTest, AnEmptyTenantListIsAllowed) {
  // A node whose tenants all come from the Kubernetes device plugin.
  const ConfigResult r = load("scheduler:\n  quantum: 50ms\ntenants: []\n");
  EXPECT_TRUE(r.ok()) << (r.errors.empty() ? "" : r.errors[0].to_string());
  EXPECT_TRUE(r.config.tenants.empty());
}

TEST_F(TenantConfigTest, TooManyTenants) {
  std::string yaml = "tenants:\n";
  for (int i = 0; i < 65; ++i) yaml += "  - name: t" + std::to_string(i) + "\n";
  EXPECT_EQ(only_error(load(yaml)), "2:3: too many tenants: 65 (at most 64)");
}

TEST_F(TenantConfigTest, YamlSyntaxError) {
  const std::string e = only_error(load("tenants:\n  - name: a\n    compute: {share: 10%\n"));
  EXPECT_EQ(e.substr(0, e.find(':', e.find(':') + 1) + 1), "4:1:") << e;
  EXPECT_NE(e.find("YAML syntax error"), std::string::npos) << e;
}

TEST_F(TenantConfigTest, EmptyFile) {
  EXPECT_EQ(only_error(load("")), "0:0: the file is empty: expected `scheduler:` and `tenants:`");
}

TEST_F(TenantConfigTest, UnreadableFile) {
  const ConfigResult r = load_config_file("/nonexistent/cuslice.yaml");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].to_string(), "/nonexistent/cuslice.yaml: cannot read the file: No such file or directory");
}

TEST_F(TenantConfigTest, ReportsEveryErrorInFileOrder) {
  const ConfigResult r = load("tenants:\n  - name: a\n    priority: top\n    memory: 3XB\n");
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_EQ(r.errors[0].line, 3);
  EXPECT_EQ(r.errors[1].line, 4);
}

}  // namespace
}  // namespace cuslice

namespace cuslice {
namespace {

class GpusConfigTest : public TenantConfigTest {};

TEST_F(GpusConfigTest, ATenantMayNameItsGpus) {
  const ConfigResult r = load(
      "tenants:\n"
      "  - {name: a, gpus: [1], compute: {share: 70%}}\n"
      "  - {name: c, gpus: [0, 3], compute: {share: 50%}}\n"
      "  - {name: d}\n");
  ASSERT_TRUE(r.ok()) << r.errors[0].to_string();
  EXPECT_EQ(r.config.tenants[0].gpu_mask, 0b10u);
  EXPECT_EQ(r.config.tenants[1].gpu_mask, 0b1001u);
  EXPECT_EQ(r.config.tenants[2].gpu_mask, 0u);
  EXPECT_TRUE(r.config.tenants[2].on_gpu(15));
  EXPECT_FALSE(r.config.tenants[0].on_gpu(0));
  // Each GPU's tenants split it: d, of every GPU, takes what is left on each.
  EXPECT_EQ(r.config.effective_shares(0), (std::vector<double>{kMinImplicitShare, 50, 50}));
  EXPECT_EQ(r.config.effective_shares(1), (std::vector<double>{70, kMinImplicitShare, 30}));
  EXPECT_EQ(r.config.effective_shares(2), (std::vector<double>{kMinImplicitShare, kMinImplicitShare, 100}));
}

TEST_F(GpusConfigTest, TheHundredPercentRuleHoldsPerGpu) {
  EXPECT_EQ(only_error(load("tenants:\n"
                            "  - {name: a, gpus: [1], compute: {share: 70%}}\n"
                            "  - {name: b, compute: {share: 20%}}\n"
                            "  - {name: c, gpus: [0, 1], compute: {share: 50%}}\n")),
            "4:46: the shares of the tenants that may use GPU 1 add up to 140%, more than 100%");
  EXPECT_EQ(only_error(load("tenants:\n"
                            "  - {name: a, gpus: [2], compute: {share: 100%}}\n"
                            "  - {name: b, gpus: [2]}\n")),
            "3:12: tenant `b` has no `compute.share`, and the explicit shares on GPU 2 (100%) leave less than 1% "
            "to each tenant without one: give it a share, or lower the others'");
}

TEST_F(GpusConfigTest, BadGpuListsSayWhy) {
  EXPECT_EQ(only_error(load("tenants:\n  - {name: a, gpus: []}\n")),
            "2:21: `gpus` is a list of GPU indices, e.g. [0, 1]; leave it out for every GPU");
  EXPECT_EQ(only_error(load("tenants:\n  - {name: a, gpus: 1}\n")),
            "2:21: `gpus` is a list of GPU indices, e.g. [0, 1]; leave it out for every GPU");
  EXPECT_EQ(only_error(load("tenants:\n  - {name: a, gpus: [16]}\n")),
            "2:22: bad `gpus` `16`: expected a GPU index from 0 to 15");
  EXPECT_EQ(only_error(load("tenants:\n  - {name: a, gpus: [1, 1]}\n")),
            "2:25: GPU 1 is listed twice in `gpus`");
}

}  // namespace
}  // namespace cuslice
