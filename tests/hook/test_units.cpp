// Pieces of the hook that need no driver: size and quota parsing, the allocation table.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "allocation_table.h"
#include "settings.h"
#include "size.h"

namespace {

using cuslice::SizeSpec;

TEST(Size, AcceptsTheUsualSpellings) {
  SizeSpec s;
  const char* why = nullptr;
  ASSERT_TRUE(cuslice::parse_size("4GiB", s, &why));
  EXPECT_EQ(s.bytes, 4ull << 30);
  ASSERT_TRUE(cuslice::parse_size("4096MiB", s, &why));
  EXPECT_EQ(s.bytes, 4ull << 30);
  ASSERT_TRUE(cuslice::parse_size(" 1.5 gb ", s, &why));
  EXPECT_EQ(s.bytes, 1500000000ull);
  ASSERT_TRUE(cuslice::parse_size("1024", s, &why));
  EXPECT_EQ(s.bytes, 1024u);
  ASSERT_TRUE(cuslice::parse_size("25%", s, &why));
  EXPECT_EQ(s.kind, SizeSpec::Kind::kPercent);
  EXPECT_EQ(s.resolve(80ull << 30), 20ull << 30);
}

TEST(Size, RejectsWhatItCannotRead) {
  SizeSpec s;
  const char* why = nullptr;
  EXPECT_FALSE(cuslice::parse_size("4 furlongs", s, &why));
  EXPECT_STREQ(why, "unknown unit: use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB or %");
  EXPECT_FALSE(cuslice::parse_size("", s, &why));
  EXPECT_FALSE(cuslice::parse_size("GiB", s, &why));
  EXPECT_FALSE(cuslice::parse_size("150%", s, &why));
  EXPECT_FALSE(cuslice::parse_size("0%", s, &why));
  EXPECT_FALSE(cuslice::parse_size("-4GiB", s, &why));
  EXPECT_FALSE(cuslice::parse_size("1.2.3GiB", s, &why));
}

TEST(MemoryLimit, OneValueForEveryDeviceOrOnePerOrdinal) {
  cuslice::Settings s;
  ASSERT_TRUE(cuslice::parse_memory_limit("4GiB", s));
  EXPECT_TRUE(s.has_limit[0] && s.has_limit[63]);
  EXPECT_EQ(s.limit[7].bytes, 4ull << 30);

  cuslice::Settings t;
  ASSERT_TRUE(cuslice::parse_memory_limit("0:4GiB,2:25%", t));
  EXPECT_TRUE(t.has_limit[0]);
  EXPECT_FALSE(t.has_limit[1]);
  EXPECT_TRUE(t.has_limit[2]);
  EXPECT_EQ(t.limit[2].kind, SizeSpec::Kind::kPercent);

  for (const char* bad : {"0:4GiB,1", "x:4GiB", "64:1GiB", "0:4 furlongs", ":4GiB"}) {
    cuslice::Settings u;
    EXPECT_FALSE(cuslice::parse_memory_limit(bad, u)) << bad;
    EXPECT_FALSE(u.valid) << bad;
    EXPECT_NE(std::string(u.error).find("CUSLICE_MEMORY_LIMIT"), std::string::npos);
  }
}

TEST(AllocationTable, InsertRemoveAndReuse) {
  cuslice::AllocationTable t(8);
  cuslice::Charge c;
  EXPECT_FALSE(t.remove(42, &c));
  ASSERT_TRUE(t.insert(42, {100, 0, 1}));
  EXPECT_TRUE(t.contains(42));
  EXPECT_EQ(t.add_refs(42, 1), 2u);
  ASSERT_TRUE(t.remove(42, &c));
  EXPECT_EQ(c.bytes, 100u);
  EXPECT_FALSE(t.remove(42, &c));  // a double free gets nothing back
  // Churn far beyond the capacity reuses tombstones instead of filling up.
  for (uint64_t k = 1; k < 100000; ++k) {
    ASSERT_TRUE(t.insert(k * 4096, {k, 0, 1}));
    ASSERT_TRUE(t.remove(k * 4096, &c));
    ASSERT_EQ(c.bytes, k);
  }
  for (uint64_t k = 1; k <= 256; ++k) ASSERT_TRUE(t.insert(k, {k, 1, 1}));
  EXPECT_FALSE(t.insert(999, {1, 1, 1}));  // full: refused, never overwritten
  EXPECT_EQ(t.forget_device(1), 256u * 257 / 2);
}

TEST(AllocationTable, ConcurrentThreadsSeeEachChargeExactlyOnce) {
  cuslice::AllocationTable t(18);  // 8 x 13334 live keys
  std::atomic<uint64_t> returned{0};
  std::vector<std::thread> threads;
  for (uint64_t id = 0; id < 8; ++id) {
    threads.emplace_back([&, id] {
      for (uint64_t i = 1; i <= 20000; ++i) {
        const uint64_t key = (id << 40) | (i << 12);
        ASSERT_TRUE(t.insert(key, {i, 0, 1}));
        if (i % 3 == 0) {
          cuslice::Charge c;
          ASSERT_TRUE(t.remove(key, &c));
          returned += c.bytes;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  uint64_t expected_removed = 0, total = 0;
  for (uint64_t i = 1; i <= 20000; ++i) {
    total += i;
    if (i % 3 == 0) expected_removed += i;
  }
  EXPECT_EQ(returned.load(), 8 * expected_removed);
  EXPECT_EQ(t.forget_device(0), 8 * (total - expected_removed));
}

}  // namespace
