// The ResourceSlice the DRA driver publishes (dra_plugin/resource_slice.h).
#include "dra_plugin/resource_slice.h"

#include <gtest/gtest.h>

namespace cuslice::dra {
namespace {

constexpr uint64_t GiB = uint64_t{1} << 30;

node::GpuInfo gpu(uint32_t index, uint64_t memory) {
  return {index, "GPU-" + std::to_string(index), "NVIDIA H100 80GB HBM3", memory, index, std::make_pair(9, 0)};
}

TEST(ResourceSlice, DeviceNamesGoBothWays) {
  EXPECT_EQ(device_name(3), "gpu-3");
  EXPECT_EQ(device_index("gpu-3"), 3u);
  EXPECT_EQ(device_index("gpu-12"), 12u);
  for (const char* bad : {"gpu-", "gpu-03", "gpu-3x", "cpu-3", "gpu--1", ""})
    EXPECT_FALSE(device_index(bad).has_value()) << bad;
}

TEST(ResourceSlice, MemoryIsTheCardLessTheReserveInWholeSteps) {
  SliceOptions o;
  o.reserve_memory = GiB + 100;
  EXPECT_EQ(memory_capacity(80 * GiB, o), 78 * GiB + (uint64_t{768} << 20));
  o.reserve_memory = 90 * GiB;
  EXPECT_EQ(memory_capacity(80 * GiB, o), 0u);
}

TEST(ResourceSlice, VersionsAreSemantic) {
  EXPECT_EQ(semantic_version("570.124.06"), "570.124.6");
  EXPECT_EQ(semantic_version("550.54"), "550.54.0");
  for (const char* bad : {"", "unknown", "1.2.3.4", "1..2", "1.", "v1"}) EXPECT_FALSE(semantic_version(bad)) << bad;
  EXPECT_EQ(architecture({9, 0}), "hopper");
  EXPECT_EQ(architecture({8, 9}), "ada-lovelace");
  EXPECT_EQ(architecture({8, 0}), "ampere");
  EXPECT_EQ(architecture({3, 5}), "");
}

TEST(ResourceSlice, OneSharedDevicePerGpuWithBothCapacities) {
  SliceOptions o;
  o.node = "node-a";
  o.reserve_memory = 2 * GiB;
  o.driver_version = "570.124.06";
  const nlohmann::json spec = slice_spec(o, {gpu(0, 80 * GiB), gpu(1, 80 * GiB)}, 7);
  EXPECT_EQ(spec["driver"], "gpu.cuslice.io");
  EXPECT_EQ(spec["nodeName"], "node-a");
  EXPECT_EQ(spec["pool"], (nlohmann::json{{"name", "node-a"}, {"generation", 7}, {"resourceSliceCount", 1}}));
  ASSERT_EQ(spec["devices"].size(), 2u);
  const nlohmann::json& d = spec["devices"][1];
  EXPECT_EQ(d["name"], "gpu-1");
  EXPECT_EQ(d["allowMultipleAllocations"], true);
  EXPECT_EQ(d["attributes"]["index"]["int"], 1);
  EXPECT_EQ(d["attributes"]["uuid"]["string"], "GPU-1");
  EXPECT_EQ(d["attributes"]["driverVersion"]["version"], "570.124.6");
  EXPECT_EQ(d["attributes"]["cudaComputeCapability"]["version"], "9.0.0");
  EXPECT_EQ(d["capacity"]["memory"]["value"], "78Gi");
  EXPECT_EQ(d["capacity"]["memory"]["requestPolicy"]["validRange"]["step"], "256Mi");
  EXPECT_EQ(d["capacity"]["compute"]["requestPolicy"]["validRange"]["min"], "1");
  EXPECT_EQ(d["attributes"]["mode"]["string"], "time-sliced");
}

TEST(ResourceSlice, SpatialGpusSaySoForCelSelectors) {
  SliceOptions o;
  o.node = "node-a";
  const nlohmann::json spec = slice_spec(o, {gpu(0, 80 * GiB), gpu(1, 80 * GiB)}, 1, 0b10);
  EXPECT_EQ(spec["devices"][0]["attributes"]["mode"]["string"], "time-sliced");
  EXPECT_EQ(spec["devices"][1]["attributes"]["mode"]["string"], "spatial");
}

TEST(ResourceSlice, NoGpuNoDeviceAndAFullyReservedGpuIsLeftOut) {
  SliceOptions o;
  o.node = "n";
  EXPECT_TRUE(slice_spec(o, {}, 1)["devices"].empty());
  o.reserve_memory = 16 * GiB;
  EXPECT_EQ(slice_spec(o, {gpu(0, 16 * GiB), gpu(1, 80 * GiB)}, 1)["devices"].size(), 1u);
  node::GpuInfo unknown = gpu(0, 80 * GiB);
  unknown.compute_capability.reset();
  const nlohmann::json d = slice_spec(o, {unknown}, 1)["devices"][0];
  EXPECT_FALSE(d["attributes"].contains("architecture"));
  EXPECT_FALSE(d["attributes"].contains("driverVersion"));  // NVML said none
}

}  // namespace
}  // namespace cuslice::dra
