// The host's available memory as the preemption policy reads it: MemAvailable from
// /proc/meminfo, or from a file given instead.
#include "scheduler/preemption/host_memory.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace cuslice {
namespace {

TEST(HostMemory, MemAvailableIsReadInBytes) {
  const char* meminfo =
      "MemTotal:       131072000 kB\n"
      "MemFree:         1000000 kB\n"
      "MemAvailable:   98765432 kB\n"
      "Buffers:           12345 kB\n";
  EXPECT_EQ(parse_mem_available(meminfo), uint64_t{98765432} * 1024);
  EXPECT_EQ(parse_mem_available("MemTotal: 1 kB\n"), std::nullopt);
  EXPECT_EQ(parse_mem_available("MemAvailable: lots\n"), std::nullopt);
  EXPECT_EQ(parse_mem_available("MemAvailable: 12 MB\n"), std::nullopt);
  EXPECT_EQ(parse_mem_available(""), std::nullopt);
}

TEST(HostMemory, TheFileIsInjectable) {
  const std::string path = testing::TempDir() + "/meminfo";
  std::ofstream(path) << "MemAvailable: 2048 kB\n";
  EXPECT_EQ(read_mem_available(path), uint64_t{2} << 20);
  std::remove(path.c_str());
  EXPECT_EQ(read_mem_available(path), std::nullopt);
  EXPECT_TRUE(read_mem_available().has_value()) << "this machine's /proc/meminfo";
}

}  // namespace
}  // namespace cuslice
