// The one parser of sizes, durations and percentages (config/size.h): a table of what it
// accepts, with the exact value, and of what it refuses, with a piece of the reason. The
// refused rows include texts that were undefined behaviour in earlier parsers (a float
// too large for an integer: "77727777777777777777ms", "infms", "1e30s").
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <string_view>

#include "config/size.h"

namespace {

using cuslice::SizeForms;
using cuslice::SizeSpec;

constexpr uint64_t kKiB = 1024, kMiB = kKiB << 10, kGiB = kMiB << 10;
constexpr SizeForms kStrict{};                                     // the CLI's --memory
constexpr SizeForms kBare{.bare_bytes = true, .percent = true};    // YAML `memory`, CUSLICE_MEMORY_LIMIT
constexpr SizeForms kBytesOnly{.bare_bytes = true, .percent = false};  // CUSLICE_CONTEXT_BYTES

struct SizeRow {
  const char* text;
  SizeForms forms;
  uint64_t bytes;  // when not a percentage
  double percent;  // > 0: expect a percentage
};

const SizeRow kGoodSizes[] = {
    {"4GiB", kStrict, 4 * kGiB, 0},
    {"4Gi", kStrict, 4 * kGiB, 0},
    {"4096MiB", kStrict, 4 * kGiB, 0},
    {"4G", kStrict, 4'000'000'000, 0},
    {"4GB", kStrict, 4'000'000'000, 0},
    {"1.5GiB", kStrict, 1'610'612'736, 0},
    {"1.5GB", kStrict, 1'500'000'000, 0},
    {"1.3KiB", kStrict, 1331, 0},  // 1331.2, rounded down
    {"512B", kStrict, 512, 0},
    {"0B", kStrict, 0, 0},
    {"4k", kStrict, 4000, 0},
    {"4K", kStrict, 4000, 0},
    {"4KiB", kStrict, 4 * kKiB, 0},
    {"4Ki", kStrict, 4 * kKiB, 0},
    {"2Ti", kStrict, 2 * kGiB * 1024, 0},
    {"1PB", kStrict, 1'000'000'000'000'000, 0},
    {"15EiB", kStrict, 15ull << 60, 0},
    {"18446744073709551615B", kStrict, UINT64_MAX, 0},
    {" 4GiB\t", kStrict, 4 * kGiB, 0},  // surrounding blanks, as an env file may leave them
    {"1073741824", kBare, kGiB, 0},
    {"600MiB", kBytesOnly, 600 * kMiB, 0},
    {"25%", kStrict, 0, 25.0},
    {"12.5%", kBare, 0, 12.5},
    {"100%", kStrict, 0, 100.0},
    {"0.001%", kStrict, 0, 0.001},
};

struct BadRow {
  const char* text;
  SizeForms forms;
  const char* reason;  // a piece of *why
};

const BadRow kBadSizes[] = {
    {"", kStrict, "empty"},
    {"   ", kStrict, "empty"},
    {"GiB", kStrict, "does not start with a number"},
    {"inf", kStrict, "does not start with a number"},
    {"nan", kStrict, "does not start with a number"},
    {".5GiB", kStrict, "does not start with a number"},
    {"-4GiB", kStrict, "no sign"},
    {"+4GiB", kStrict, "no sign"},
    {"4 GiB", kStrict, "no space"},
    {"4 furlongs", kStrict, "unknown unit"},
    {"4 %", kStrict, "no space"},
    {"4GiB 2", kStrict, "unknown unit"},
    {"4furlongs", kStrict, "unknown unit"},
    {"0x10GiB", kStrict, "unknown unit"},
    {"1e9", kBare, "unknown unit"},
    {"1e30B", kBare, "unknown unit"},
    {"1.2.3GiB", kStrict, "unknown unit"},
    {"4GiBs", kStrict, "unknown unit"},
    {"1.GiB", kStrict, "decimal point must be followed by digits"},
    {"4gib", kStrict, "case-sensitive"},
    {"4gb", kStrict, "case-sensitive"},
    {"4g", kStrict, "case-sensitive"},
    {"4mb", kStrict, "case-sensitive"},
    {"4096", kStrict, "a unit is needed"},
    {"1.5", kBare, "whole number"},
    {"25%", kBytesOnly, "percentage is not accepted"},
    {"0%", kStrict, "above 0% and at most 100%"},
    {"150%", kStrict, "above 0% and at most 100%"},
    {"100.5%", kStrict, "above 0% and at most 100%"},
    {"18446744073709551616B", kStrict, "too large"},
    {"99999999999999999999999B", kStrict, "too large"},
    {"16EiB", kStrict, "too large"},
    {"17179869184GiB", kStrict, "too large"},
    {"1.0000000001GiB", kStrict, "at most 9 digits"},
};

TEST(SizeTable, AcceptedFormsHaveTheirExactValue) {
  for (const SizeRow& row : kGoodSizes) {
    SizeSpec spec;
    const char* why = nullptr;
    ASSERT_TRUE(cuslice::parse_size(row.text, spec, &why, row.forms)) << row.text << ": " << why;
    if (row.percent > 0) {
      EXPECT_EQ(spec.kind, SizeSpec::Kind::kPercent) << row.text;
      EXPECT_DOUBLE_EQ(spec.percent, row.percent) << row.text;
    } else {
      EXPECT_EQ(spec.kind, SizeSpec::Kind::kBytes) << row.text;
      EXPECT_EQ(spec.bytes, row.bytes) << row.text;
    }
  }
}

TEST(SizeTable, RefusedFormsSayWhyAndLeaveTheResultAlone) {
  for (const BadRow& row : kBadSizes) {
    SizeSpec spec{SizeSpec::Kind::kBytes, 12345, 0};
    const char* why = nullptr;
    EXPECT_FALSE(cuslice::parse_size(row.text, spec, &why, row.forms)) << '"' << row.text << '"';
    ASSERT_NE(why, nullptr) << row.text;
    EXPECT_NE(std::string(why).find(row.reason), std::string::npos)
        << '"' << row.text << "\": " << why << " (expected: " << row.reason << ")";
    EXPECT_EQ(spec.bytes, 12345u) << row.text;
  }
}

TEST(SizeTable, ReasonsListTheAcceptedForms) {
  SizeSpec spec;
  const char* why = nullptr;
  for (const char* text : {"4 furlongs", "4furlongs", "4096", "-1GiB", "GiB"}) {
    ASSERT_FALSE(cuslice::parse_size(text, spec, &why));
    const std::string reason = why;
    for (const char* form : {"4GiB", "4Gi", "4096MiB", "4G", "10^9", "25%"})
      EXPECT_NE(reason.find(form), std::string::npos) << text << ": " << reason << " lacks " << form;
  }
  // Where a percentage is not accepted, the forms do not offer one.
  ASSERT_FALSE(cuslice::parse_size("4furlongs", spec, &why, kBytesOnly));
  EXPECT_EQ(std::string(why).find('%'), std::string::npos) << why;
}

TEST(SizeTable, ANullReasonIsAllowed) {
  SizeSpec spec;
  EXPECT_FALSE(cuslice::parse_size("lots", spec, nullptr));
  EXPECT_TRUE(cuslice::parse_size("1GiB", spec, nullptr));
}

struct DurationRow {
  const char* text;
  uint64_t ns;
};

const DurationRow kGoodDurations[] = {
    {"20ms", 20'000'000},
    {"1.5s", 1'500'000'000},
    {"500us", 500'000},
    {"500\xC2\xB5s", 500'000},  // µs (micro sign)
    {"500\xCE\xBCs", 500'000},  // μs (Greek mu)
    {"500ns", 500},
    {"0us", 0},
    {"1s", 1'000'000'000},
    {"0.5ns", 0},  // rounded down
    {"0.000000001s", 1},
    {"100ms", 100'000'000},
    {" 250us ", 250'000},
    {"9223372036s", 9'223'372'036'000'000'000},
    {"9223372036.854775807s", 9'223'372'036'854'775'807},
};

struct BadDurationRow {
  const char* text;
  const char* reason;
};

const BadDurationRow kBadDurations[] = {
    {"77727777777777777777ms", "too long"},
    {"infms", "does not start with a number"},
    {"0x10ms", "unknown unit"},
    {"1e30s", "unknown unit"},
    {"1e3ms", "unknown unit"},
    {"nan", "does not start with a number"},
    {"", "empty"},
    {"20", "a unit is needed"},
    {"20MS", "lower-case"},
    {"20S", "lower-case"},
    {"20 ms", "no space"},
    {"20 minutes", "unknown unit"},
    {"-1ms", "no sign"},
    {"1m", "unknown unit"},
    {"1h", "unknown unit"},
    {"20msec", "unknown unit"},
    {"1.5.s", "unknown unit"},
    {"9223372037s", "too long"},
    {"9223372036.854775808s", "too long"},
    {"18446744073709551615ns", "too long"},
    {"0.0000000001s", "at most 9 digits"},
};

TEST(DurationTable, AcceptedFormsHaveTheirExactValue) {
  for (const DurationRow& row : kGoodDurations) {
    uint64_t ns = 777;
    const char* why = nullptr;
    ASSERT_TRUE(cuslice::parse_duration(row.text, ns, &why)) << row.text << ": " << why;
    EXPECT_EQ(ns, row.ns) << row.text;
  }
}

TEST(DurationTable, RefusedFormsSayWhyAndListTheAcceptedForms) {
  for (const BadDurationRow& row : kBadDurations) {
    uint64_t ns = 777;
    const char* why = nullptr;
    EXPECT_FALSE(cuslice::parse_duration(row.text, ns, &why)) << '"' << row.text << '"';
    ASSERT_NE(why, nullptr) << row.text;
    const std::string reason = why;
    EXPECT_NE(reason.find(row.reason), std::string::npos)
        << '"' << row.text << "\": " << reason << " (expected: " << row.reason << ")";
    EXPECT_EQ(ns, 777u) << row.text;
  }
  const char* why = nullptr;
  uint64_t ns = 0;
  ASSERT_FALSE(cuslice::parse_duration("5 minutes", ns, &why));
  for (const char* form : {"20ms", "1.5s", "500us", "500ns"}) EXPECT_NE(std::string(why).find(form), std::string::npos);
}

TEST(PercentTable, AcceptsOnlyWrittenPercentages) {
  const std::pair<const char*, double> good[] = {{"60%", 60.0}, {"12.5%", 12.5}, {"100%", 100.0}, {"0.5%", 0.5}};
  for (const auto& [text, value] : good) {
    double p = 0;
    const char* why = nullptr;
    ASSERT_TRUE(cuslice::parse_percent(text, p, &why)) << text << ": " << why;
    EXPECT_DOUBLE_EQ(p, value) << text;
  }
  const std::pair<const char*, const char*> bad[] = {
      {"60", "written with %"}, {"0%", "above 0%"},       {"150%", "at most 100%"}, {"-5%", "no sign"},
      {"60 %", "no space"},     {"60%%", "not a percentage"}, {"abc", "does not start"}, {"0.6", "written with %"},
      {"1e2%", "not a percentage"},
  };
  for (const auto& [text, reason] : bad) {
    double p = -1;
    const char* why = nullptr;
    EXPECT_FALSE(cuslice::parse_percent(text, p, &why)) << text;
    ASSERT_NE(why, nullptr) << text;
    EXPECT_NE(std::string(why).find(reason), std::string::npos) << text << ": " << why;
    EXPECT_EQ(p, -1) << text;
  }
}

// The hook parses at start-up inside the application: no allocation on any path.
std::atomic<long> g_allocations{0};

TEST(Parsers, NeverAllocate) {
  const long before = g_allocations.load();
  ASSERT_GT(before, 0) << "the counting operator new is not in use";
  SizeSpec spec;
  uint64_t ns = 0;
  double p = 0;
  const char* why = nullptr;
  for (const SizeRow& row : kGoodSizes) cuslice::parse_size(row.text, spec, &why, row.forms);
  for (const BadRow& row : kBadSizes) cuslice::parse_size(row.text, spec, &why, row.forms);
  for (const DurationRow& row : kGoodDurations) cuslice::parse_duration(row.text, ns, &why);
  for (const BadDurationRow& row : kBadDurations) cuslice::parse_duration(row.text, ns, &why);
  cuslice::parse_percent("60%", p, &why);
  cuslice::parse_percent("x", p, &why);
  EXPECT_EQ(g_allocations.load(), before);
}

}  // namespace

// Counts every allocation of this test program (GoogleTest's included), for NeverAllocate.
void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
