// GetPreferredAllocation (device_plugin/preferred_allocation.h): a container's memory on one
// GPU, the one that fits best (binpack, the default; placement's own tests are test_placement).
#include <gtest/gtest.h>

#include "tests/device_plugin/ledger_test_support.h"

namespace cuslice::device_plugin {
namespace {

TEST(Ledger, PreferredMemoryIsOnOneGpuTheOneThatFitsBest) {
  Ledger l = ledger_with(3);
  const auto now = Clock::now();
  // GPU 0: 16 free, GPU 1: 10 free, GPU 2: 4 free.
  l.allocate_memory(ids(1, {10, 11, 12, 13, 14, 15}), now, "k8s-a", "k");
  l.allocate_memory(ids(2, {4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}), now, "k8s-b", "k");
  std::vector<std::string> available;
  for (const Device& d : l.memory_devices()) {
    const auto m = parse_memory_id(d.id);
    if (!l.used_units(l.gpu_by_uuid(m->gpu_uuid)->index).count(m->unit)) available.push_back(d.id);
  }
  const auto on_gpu = [](const std::vector<std::string>& chosen) {
    std::set<std::string> gpus;
    for (const std::string& id : chosen) gpus.insert(parse_memory_id(id)->gpu_uuid);
    return gpus;
  };
  EXPECT_EQ(on_gpu(l.preferred_memory(available, {}, 8, now)), std::set<std::string>{uuid(1)});
  EXPECT_EQ(on_gpu(l.preferred_memory(available, {}, 4, now)), std::set<std::string>{uuid(2)});
  EXPECT_EQ(on_gpu(l.preferred_memory(available, {}, 12, now)), std::set<std::string>{uuid(0)});
  EXPECT_EQ(l.preferred_memory(available, {}, 12, now).size(), 12u);
  EXPECT_TRUE(l.preferred_memory(available, {}, 17, now).empty());  // no single GPU: Allocate explains
  // must_include pins the GPU and comes first.
  const auto pinned = l.preferred_memory(available, ids(0, {5}), 3, now);
  ASSERT_EQ(pinned.size(), 3u);
  EXPECT_EQ(pinned[0], memory_id(uuid(0), 5));
  EXPECT_EQ(on_gpu(pinned), std::set<std::string>{uuid(0)});
}

}  // namespace
}  // namespace cuslice::device_plugin
