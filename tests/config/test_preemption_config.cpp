// The configuration of memory preemption: `preemptible` tenants, the `scheduler.preemption`
// settings, and the rule that the quotas of the other tenants are guarantees that fit the card,
// each error at its exact line and column.
#include <gtest/gtest.h>

#include <string>

#include "config/tenant_config.h"

namespace cuslice {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kGiB = uint64_t{1} << 30;

// "line:column: message" of each error, in order.
std::vector<std::string> errors(const ConfigResult& r) {
  std::vector<std::string> out;
  for (const ConfigError& e : r.errors) {
    EXPECT_EQ(e.file, "cuslice.yaml");
    out.push_back(std::to_string(e.line) + ":" + std::to_string(e.column) + ": " + e.message);
  }
  return out;
}

ConfigResult parse(const std::string& yaml) { return parse_config(yaml, "cuslice.yaml"); }

TEST(PreemptionConfig, SettingsAndPreemptibleTenantsAreRead) {
  const ConfigResult r = parse(R"(scheduler:
  gpu_memory: 80GiB
  preemption:
    allocation_wait: 90s
    resume_holdoff: 2500ms
    host_reserve: 8GiB
    resume_margin: 1GiB
    room_margin: 3GiB
    unsuspendable: keep
tenants:
  - name: serve
    priority: high
    memory: 40GiB
  - name: train
    priority: low
    memory: 75GiB
    preemptible: true
)");
  ASSERT_TRUE(r.ok()) << errors(r).front();
  const PreemptionSettings& p = r.config.scheduler.preemption;
  EXPECT_EQ(p.allocation_wait, 90s);
  EXPECT_EQ(p.resume_holdoff, 2500ms);
  EXPECT_EQ(p.host_reserve, 8 * kGiB);
  EXPECT_EQ(p.resume_margin, kGiB);
  EXPECT_EQ(p.room_margin, 3 * kGiB);
  EXPECT_FALSE(p.stop_unsuspendable);
  EXPECT_FALSE(r.config.tenants[0].preemptible);
  EXPECT_TRUE(r.config.tenants[1].preemptible);
}

TEST(PreemptionConfig, EverySettingHasADefault) {
  const ConfigResult r = parse("tenants:\n  - name: a\n");
  ASSERT_TRUE(r.ok());
  const PreemptionSettings& p = r.config.scheduler.preemption;
  EXPECT_EQ(p.allocation_wait, 60s);
  EXPECT_EQ(p.resume_holdoff, 1s);
  EXPECT_EQ(p.host_reserve, 4 * kGiB);
  EXPECT_EQ(p.resume_margin, kGiB / 2);
  EXPECT_EQ(p.room_margin, kGiB) << "what a PyTorch process takes beyond its tensors on an H200";
  EXPECT_TRUE(p.stop_unsuspendable) << "what a tenant says of itself never spares it";
  EXPECT_FALSE(r.config.tenants[0].preemptible);
}

TEST(PreemptionConfig, BadSettingsAreErrors) {
  const ConfigResult r = parse(R"(scheduler:
  preemption:
    allocation_wait: 0s
    resume_holdoff: soon
    host_reserve: 10%
    resume_margin: -1
    patience: 3s
    unsuspendable: spare
tenants:
  - name: a
    preemptible: maybe
)");
  // How the shared parsers explain a bad duration and a bad size, as they do for any key.
  const auto why = [](const std::string& yaml, const std::string& prefix) {
    const std::string e = errors(parse(yaml)).at(0);
    return e.substr(e.find(prefix) + prefix.size());
  };
  const std::string bad_duration = why("scheduler: {quantum: soon}\ntenants:\n  - name: a\n", "`quantum`: ");
  const std::string bad_size = why("tenants:\n  - name: a\n    memory: -1\n", "`memory`: ");
  EXPECT_EQ(errors(r), (std::vector<std::string>{
                           "3:22: `allocation_wait` must be above zero",
                           "4:21: bad duration `soon` for `resume_holdoff`: " + bad_duration,
                           "5:19: `host_reserve` is a size in bytes, e.g. 4GiB, not a percentage",
                           "6:20: bad size `-1` for `resume_margin`: " + bad_size,
                           "7:5: unknown key `patience` (expected one of: allocation_wait, resume_holdoff, host_reserve, resume_margin, room_margin, unsuspendable, fast)",
                           "8:20: bad `unsuspendable` `spare`: expected stop or keep",
                           "11:18: bad `preemptible` `maybe`: expected true or false",
                       }));
}

TEST(PreemptionConfig, WithPreemptibleTenantsEveryOtherTenantNeedsAQuota) {
  const ConfigResult r = parse(R"(scheduler:
  gpu_memory: 80GiB
tenants:
  - name: serve
    priority: high
  - name: train
    preemptible: true
)");
  EXPECT_EQ(errors(r), (std::vector<std::string>{
                           "4:11: tenant `serve` needs a `memory` quota: with preemptible tenants in the file, the "
                           "quotas of the others are guarantees (or mark it `preemptible: true`)"}));
}

TEST(PreemptionConfig, GuaranteesMustFitTheCard) {
  const ConfigResult r = parse(R"(scheduler:
  gpu_memory: 80GiB
tenants:
  - name: serve
    memory: 50GiB
  - name: batch
    memory: 40%
  - name: train
    memory: 80GiB
    preemptible: true
)");
  EXPECT_EQ(errors(r), (std::vector<std::string>{
                           "7:13: the quotas of the tenants that are not preemptible add up to 88046829568 bytes, "
                           "more than the card (`gpu_memory` is 85899345920 bytes): they are guarantees; mark "
                           "tenants that may be suspended `preemptible: true`"}));
}

TEST(PreemptionConfig, PercentagesAreCheckedWithoutTheCardsSize) {
  ConfigResult r = parse(R"(tenants:
  - name: serve
    memory: 60%
  - name: batch
    memory: 50%
  - name: train
    preemptible: true
)");
  EXPECT_EQ(errors(r), (std::vector<std::string>{
                           "5:13: the quotas of the tenants that are not preemptible add up to 110% of the card, "
                           "more than 100%: they are guarantees; mark tenants that may be suspended "
                           "`preemptible: true`"}));
  r = parse(R"(tenants:
  - name: serve
    memory: 20GiB
  - name: train
    preemptible: true
)");
  EXPECT_EQ(errors(r), (std::vector<std::string>{
                           "3:13: with preemptible tenants, give `gpu_memory` so that quotas in bytes can be "
                           "checked against the card, or write the quotas of the tenants that are not "
                           "preemptible as percentages"}));
}

TEST(PreemptionConfig, OnlyPreemptibleTenantsMayOverCommit) {
  ConfigResult r = parse(R"(scheduler:
  gpu_memory: 80GiB
tenants:
  - name: serve
    memory: 60%
  - name: train
    memory: 80%
    preemptible: true
  - name: eval
    memory: 50GiB
    preemptible: true
  - name: notebook
    preemptible: true
)");
  EXPECT_TRUE(r.ok()) << errors(r).front();
  // Without preemptible tenants quotas are caps, not guarantees, as before: no sum is checked.
  r = parse(R"(scheduler:
  gpu_memory: 80GiB
tenants:
  - name: a
    memory: 60GiB
  - name: b
    memory: 60GiB
  - name: c
)");
  EXPECT_TRUE(r.ok()) << errors(r).front();
}

}  // namespace
}  // namespace cuslice
