// Kubernetes quantities as the DRA driver reads and writes them (dra_plugin/quantity.h).
#include "dra_plugin/quantity.h"

#include <gtest/gtest.h>

namespace cuslice::dra {
namespace {

constexpr uint64_t GiB = uint64_t{1} << 30;

TEST(Quantity, ReadsTheApiServersForms) {
  EXPECT_EQ(parse_quantity("8Gi"), 8 * GiB);
  EXPECT_EQ(parse_quantity("256Mi"), uint64_t{256} << 20);
  EXPECT_EQ(parse_quantity("30"), 30u);
  EXPECT_EQ(parse_quantity("+30"), 30u);
  EXPECT_EQ(parse_quantity("8589934592"), 8 * GiB);
  EXPECT_EQ(parse_quantity("1.5Gi"), GiB + GiB / 2);
  EXPECT_EQ(parse_quantity("8G"), 8'000'000'000u);
  EXPECT_EQ(parse_quantity("2k"), 2000u);
  EXPECT_EQ(parse_quantity("1e3"), 1000u);
  EXPECT_EQ(parse_quantity("1E3"), 1000u);
}

TEST(Quantity, RoundsUpToAWholeUnit) {
  EXPECT_EQ(parse_quantity("500m"), 1u);
  EXPECT_EQ(parse_quantity("1.0001"), 2u);
  EXPECT_EQ(parse_quantity("0"), 0u);
}

TEST(Quantity, RefusesWhatIsNotOne) {
  for (const char* bad : {"", "Gi", "-1", "8 Gi", "8gi", "8GiB", "1.2.3", "0x10", "1e", "9Ei", "99999999999999999999"})
    EXPECT_FALSE(parse_quantity(bad).has_value()) << bad;
}

TEST(Quantity, WritesTheLargestBinarySuffixThatDivides) {
  EXPECT_EQ(binary_quantity(8 * GiB), "8Gi");
  EXPECT_EQ(binary_quantity(15 * GiB + (uint64_t{512} << 20)), "15872Mi");
  EXPECT_EQ(binary_quantity(100), "100");
  EXPECT_EQ(binary_quantity(0), "0");
  EXPECT_EQ(parse_quantity(binary_quantity(80 * GiB)), 80 * GiB);
}

}  // namespace
}  // namespace cuslice::dra
