// GetPreferredAllocation (device_plugin/preferred_allocation.h): a container's memory on one
// GPU, the one that fits best.
#include <gtest/gtest.h>

#include "ledger_test_support.h"

namespace cuslice::device_plugin {
namespace {

TEST(Ledger, PreferredMemoryIsOnOneGpuTheOneThatFitsBest) {
  Ledger l = ledger_with(3);
  // GPU 0: 16 free, GPU 1: 10 free, GPU 2: 4 free.
  std::vector<std::string> available = all_ids(l.memory_devices());
  const auto drop = [&](int gpu, uint32_t from) {
    std::erase_if(available, [&](const std::string& id) {
      const auto m = parse_memory_id(id);
      return m->gpu_uuid == uuid(gpu) && m->unit >= from;
    });
  };
  drop(1, 10);
  drop(2, 4);
  const auto on_gpu = [](const std::vector<std::string>& chosen) {
    std::set<std::string> gpus;
    for (const std::string& id : chosen) gpus.insert(parse_memory_id(id)->gpu_uuid);
    return gpus;
  };
  EXPECT_EQ(on_gpu(l.preferred_memory(available, {}, 8)), std::set<std::string>{uuid(1)});
  EXPECT_EQ(on_gpu(l.preferred_memory(available, {}, 4)), std::set<std::string>{uuid(2)});
  EXPECT_EQ(on_gpu(l.preferred_memory(available, {}, 12)), std::set<std::string>{uuid(0)});
  EXPECT_EQ(l.preferred_memory(available, {}, 12).size(), 12u);
  EXPECT_TRUE(l.preferred_memory(available, {}, 17).empty());  // no single GPU: Allocate explains
  // must_include pins the GPU and comes first.
  const auto pinned = l.preferred_memory(available, ids(0, {5}), 3);
  ASSERT_EQ(pinned.size(), 3u);
  EXPECT_EQ(pinned[0], memory_id(uuid(0), 5));
  EXPECT_EQ(on_gpu(pinned), std::set<std::string>{uuid(0)});
}

}  // namespace
}  // namespace cuslice::device_plugin
