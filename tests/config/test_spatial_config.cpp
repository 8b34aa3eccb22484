// The configuration of tenants side by side: `scheduler.spatial` (which GPUs, the MPS control
// program and its directories), a tenant's `compute.sm` and `spatial: false`, who is in a
// GPU's spatial group, and each mistake reported where it was written.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/tenant_config.h"

namespace cuslice {
namespace {

std::vector<std::string> errors(const ConfigResult& r) {
  std::vector<std::string> out;
  for (const ConfigError& e : r.errors) out.push_back(std::to_string(e.line) + ":" + std::to_string(e.column) + ": " + e.message);
  return out;
}

ConfigResult parse(const std::string& yaml) { return parse_config(yaml, "cuslice.yaml"); }

TEST(SpatialConfig, GpusProgramDirectoriesAndTenantSettingsAreRead) {
  const ConfigResult r = parse(R"(scheduler:
  spatial:
    gpus: [0, 2]
    mps_control: /opt/cuda/bin/nvidia-cuda-mps-control
    pipe_directory: /run/cuslice/mps
    log_directory: /var/log/cuslice-mps
tenants:
  - {name: a, gpus: [0], compute: {sm: 25%}, priority: high}
  - {name: b, gpus: [0, 2]}
  - {name: trainer, gpus: [0], spatial: false}
  - {name: wide}
)");
  ASSERT_TRUE(r.ok()) << errors(r).front();
  const Config& c = r.config;
  EXPECT_EQ(c.scheduler.spatial.gpu_mask, 0b101u);
  EXPECT_FALSE(c.scheduler.spatial.all_gpus);
  EXPECT_EQ(c.scheduler.spatial.mps_control, "/opt/cuda/bin/nvidia-cuda-mps-control");
  EXPECT_EQ(c.scheduler.spatial.pipe_directory, "/run/cuslice/mps");
  EXPECT_EQ(c.scheduler.spatial.log_directory, "/var/log/cuslice-mps");
  EXPECT_EQ(c.tenants[0].sm_percent, 25u);
  EXPECT_TRUE(c.spatial_member(c.tenants[0], 0));
  EXPECT_FALSE(c.spatial_member(c.tenants[0], 2));  // not one of its GPUs
  EXPECT_TRUE(c.spatial_member(c.tenants[1], 2));
  EXPECT_FALSE(c.spatial_member(c.tenants[2], 0));  // opted out
  // Every GPU of the node, two of them spatial: its processes cannot join MPS, which would
  // hide the others from them, so it time-slices everywhere.
  EXPECT_FALSE(c.spatial_member(c.tenants[3], 0));
}

TEST(SpatialConfig, AllGpusTakesEveryTenantThatDoesNotOptOut) {
  const ConfigResult r = parse("scheduler: {spatial: {gpus: all}}\ntenants:\n  - {name: a}\n  - {name: b, spatial: false}\n");
  ASSERT_TRUE(r.ok()) << errors(r).front();
  EXPECT_TRUE(r.config.scheduler.spatial.all_gpus);
  EXPECT_TRUE(r.config.spatial_member(r.config.tenants[0], 7));
  EXPECT_FALSE(r.config.spatial_member(r.config.tenants[1], 7));
}

TEST(SpatialConfig, WithoutSpatialNobodyIsAMember) {
  const ConfigResult r = parse("tenants:\n  - {name: a}\n");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.config.scheduler.spatial.any());
  EXPECT_FALSE(r.config.spatial_member(r.config.tenants[0], 0));
}

TEST(SpatialConfig, MistakesAreReportedWhereTheyAre) {
  const ConfigResult r = parse(R"(scheduler:
  spatial:
    gpus: [0, 0]
    mps_control: nvidia-cuda-mps-control
    pipe: /x
tenants:
  - {name: a, compute: {sm: 12.5%}}
  - {name: b, compute: {sm: 0.5%}}
)");
  const std::vector<std::string> e = errors(r);
  ASSERT_EQ(e.size(), 5u) << ::testing::PrintToString(e);
  EXPECT_EQ(e[0], "3:15: GPU 0 is listed twice in `spatial.gpus`");
  EXPECT_EQ(e[1], "4:18: `mps_control` must be an absolute path of fewer than 200 characters");
  EXPECT_EQ(e[2], "5:5: unknown key `pipe` (expected one of: gpus, mps_control, pipe_directory, log_directory)");
  EXPECT_EQ(e[3], "7:29: `sm` `12.5%` must be a whole percentage from 1% to 100%");
  EXPECT_EQ(e[4], "8:29: `sm` `0.5%` must be a whole percentage from 1% to 100%");
}

TEST(SpatialConfig, SmOnATenantThatRunsOnNoSpatialGpuIsRefused) {
  const ConfigResult r = parse(R"(scheduler: {spatial: {gpus: [1]}}
tenants:
  - {name: a, gpus: [0], compute: {sm: 50%}}
  - {name: b, gpus: [1], spatial: false, compute: {sm: 50%}}
  - {name: c, gpus: [1], compute: {sm: 50%}}
)");
  const std::vector<std::string> e = errors(r);
  ASSERT_EQ(e.size(), 2u) << ::testing::PrintToString(e);
  EXPECT_NE(e[0].find("3:40: `sm` applies on spatial GPUs only"), std::string::npos) << e[0];
  EXPECT_NE(e[1].find("4:56: `sm` applies on spatial GPUs only"), std::string::npos) << e[1];
}

TEST(SpatialConfig, SpatialNeedsItsGpus) {
  const std::vector<std::string> e = errors(parse("scheduler: {spatial: {mps_control: /bin/x}}\ntenants: []\n"));
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0], "1:22: `spatial` needs `gpus`: a list of GPU indices, or `all`");
}

}  // namespace
}  // namespace cuslice
