// Pieces of the hook that need no driver: its settings and quota parsing, the allocation table.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "hook/base/settings.h"
#include "hook/bookkeeping/allocation_table.h"

namespace {

using cuslice::SizeSpec;

// The spellings themselves are tabled in tests/config/size_test.cpp; here, that the hook's
// variables go through that parser and refuse, rather than misread, what it refuses.
TEST(Settings, VariablesUseTheOneParserOfSizesAndDurations) {
  struct Case {
    const char* var;
    const char* value;
    bool valid;
  };
  const Case cases[] = {
      {"CUSLICE_MAX_QUEUED", "500ns", true},
      {"CUSLICE_MAX_QUEUED", "1.5ms", true},
      {"CUSLICE_PARK_QUEUED", "0us", true},
      {"CUSLICE_MAX_QUEUED", "infms", false},
      {"CUSLICE_MAX_QUEUED", "0x10ms", false},
      {"CUSLICE_PREEMPT_QUEUED", "77727777777777777777ms", false},
      {"CUSLICE_PARK_QUEUED", "1e30s", false},
      {"CUSLICE_PARK_QUEUED", "20", false},
      {"CUSLICE_CONTEXT_BYTES", "600MiB", true},
      {"CUSLICE_CONTEXT_BYTES", "629145600", true},
      {"CUSLICE_CONTEXT_BYTES", "25%", false},
      {"CUSLICE_CONTEXT_HEADROOM", "99999999999999999999999B", false},
      {"CUSLICE_CONTEXT_WARMUP", "0s", true},
      {"CUSLICE_CONTEXT_WARMUP", "30", false},
  };
  for (const Case& c : cases) {
    ASSERT_EQ(setenv(c.var, c.value, 1), 0);
    cuslice::load_settings();
    const cuslice::Settings& s = cuslice::settings();
    EXPECT_EQ(s.valid, c.valid) << c.var << "=" << c.value << ": " << s.error;
    if (!c.valid) {
      EXPECT_NE(std::string(s.error).find(c.var), std::string::npos) << s.error;
    }
    unsetenv(c.var);
  }
  cuslice::load_settings();
  EXPECT_EQ(cuslice::settings().context_warmup_ns, 30'000'000'000u) << "the default";
  ASSERT_EQ(setenv("CUSLICE_MAX_QUEUED", "1.5ms", 1), 0);
  ASSERT_EQ(setenv("CUSLICE_CONTEXT_BYTES", "1Gi", 1), 0);
  ASSERT_EQ(setenv("CUSLICE_CONTEXT_WARMUP", "2.5s", 1), 0);
  cuslice::load_settings();
  EXPECT_EQ(cuslice::settings().max_queued_ns, 1'500'000u);
  EXPECT_EQ(cuslice::settings().context_bytes, 1ull << 30);
  EXPECT_EQ(cuslice::settings().context_warmup_ns, 2'500'000'000u);
  unsetenv("CUSLICE_MAX_QUEUED");
  unsetenv("CUSLICE_CONTEXT_BYTES");
  unsetenv("CUSLICE_CONTEXT_WARMUP");
  cuslice::load_settings();
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

// Found by fuzzing (tests/fuzz/regressions/size/): more nanoseconds than 64 bits hold was
// converted anyway, which is undefined behaviour; now it is refused.
TEST(Durations, TooLongToHoldAreRefused) {
  for (const char* value : {"1e30s", "77727777777777777777ms", "infms"}) {
    setenv("CUSLICE_MAX_QUEUED", value, 1);
    cuslice::load_settings();
    EXPECT_FALSE(cuslice::settings().valid) << value;
    EXPECT_NE(std::string(cuslice::settings().error).find("CUSLICE_MAX_QUEUED"), std::string::npos) << value;
  }
  setenv("CUSLICE_MAX_QUEUED", "2ms", 1);
  cuslice::load_settings();
  EXPECT_TRUE(cuslice::settings().valid);
  EXPECT_EQ(cuslice::settings().max_queued_ns, 2'000'000u);
  unsetenv("CUSLICE_MAX_QUEUED");
  cuslice::load_settings();
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
