// Device IDs (device_plugin/device_ids.h): one spelling per ID, each within the kubelet's
// limit.
#include "device_plugin/device_ids.h"

#include <gtest/gtest.h>

#include "tests/device_plugin/ledger_test_support.h"

namespace cuslice::device_plugin {
namespace {

TEST(DeviceIds, RoundTrip) {
  const auto m = parse_memory_id(memory_id(uuid(3), 17));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->gpu_uuid, uuid(3));
  EXPECT_EQ(m->unit, 17u);
  EXPECT_EQ(parse_compute_id(compute_id(250)), 250u);
  EXPECT_FALSE(parse_memory_id("GPU-x-m07"));  // one spelling per ID
  EXPECT_FALSE(parse_memory_id("-m3"));
  EXPECT_FALSE(parse_compute_id("c"));
  EXPECT_FALSE(parse_compute_id("c-1"));
  EXPECT_LE(memory_id(uuid(0), 511).size(), 63u);  // the kubelet's limit
}

}  // namespace
}  // namespace cuslice::device_plugin
