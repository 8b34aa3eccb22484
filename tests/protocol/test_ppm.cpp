// protocol/ppm.h: percentages to parts per million and fractions of a card to bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "protocol/ppm.h"

namespace cuslice {
namespace {

TEST(Ppm, PercentRoundsToTheNearestPpm) {
  EXPECT_EQ(percent_to_ppm(33.3), 333'000u);
  // 1.13 * 10'000 is 11'299.999... in binary floating point: truncation would lose a ppm.
  EXPECT_EQ(percent_to_ppm(1.13), 11'300u);
  EXPECT_EQ(percent_to_ppm(0.00004), 0u);
  EXPECT_EQ(percent_to_ppm(0.00005), 1u);
  EXPECT_EQ(percent_to_ppm(100.0), kPpmWhole);
}

TEST(Ppm, PercentOutsideTheRangeIsClamped) {
  EXPECT_EQ(percent_to_ppm(0.0), 0u);
  EXPECT_EQ(percent_to_ppm(-5.0), 0u);
  EXPECT_EQ(percent_to_ppm(std::numeric_limits<double>::quiet_NaN()), 0u);
  EXPECT_EQ(percent_to_ppm(250.0), kPpmWhole);
  EXPECT_EQ(percent_to_ppm(std::numeric_limits<double>::infinity()), kPpmWhole);
}

TEST(Ppm, PpmBackToPercent) {
  EXPECT_DOUBLE_EQ(ppm_to_percent(333'000), 33.3);
  EXPECT_DOUBLE_EQ(ppm_to_percent(kPpmWhole), 100.0);
  for (const double p : {0.5, 1.13, 25.0, 33.3, 60.0, 99.99}) EXPECT_EQ(percent_to_ppm(ppm_to_percent(percent_to_ppm(p))), percent_to_ppm(p));
}

TEST(Ppm, BytesAreRoundedDownAndExact) {
  EXPECT_EQ(ppm_of_bytes(1'000'000, 333'000), 333'000u);
  EXPECT_EQ(ppm_of_bytes(999'999, 333'000), 332'999u);  // 332'999.667
  EXPECT_EQ(ppm_of_bytes(15'000'000'000, 333'000), 4'995'000'000u);
  EXPECT_EQ(ppm_of_bytes(17'179'869'184, 333'000), 5'720'896'438u);  // 16 GiB: ...438.272
  EXPECT_EQ(ppm_of_bytes(0, 333'000), 0u);
  EXPECT_EQ(ppm_of_bytes(17'179'869'184, kPpmWhole), 17'179'869'184u);
  // No overflow where total * ppm exceeds 64 bits.
  const uint64_t huge = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(ppm_of_bytes(huge, kPpmWhole), huge);
  EXPECT_EQ(ppm_of_bytes(huge, 500'000), huge / 2);
}

TEST(Ppm, PercentOfBytesGoesThroughPpm) {
  for (const uint64_t card : {17'179'869'184ull, 15'000'000'000ull, 12'884'901'887ull})
    for (const double p : {1.13, 25.0, 33.3, 100.0}) EXPECT_EQ(percent_of_bytes(card, p), ppm_of_bytes(card, percent_to_ppm(p)));
}

}  // namespace
}  // namespace cuslice
