// Fractions as the segment and the wire carry them: parts per million (ppm) of a whole, and
// the one conversion from the percentages people write ("33.3%") and the one from a
// fraction of a card to bytes. The daemon, the hook's client, the hook's local limit and
// `cuslice status` all convert through here, so a quota of 33.3% is the same number of
// bytes wherever it is resolved. Header-only and constexpr; no allocation, no exceptions
// (the hook includes it).
#pragma once

#include <cstdint>

namespace cuslice {

inline constexpr uint32_t kPpmPerPercent = 10'000;
inline constexpr uint32_t kPpmWhole = 100 * kPpmPerPercent;  // 100%

// A percentage as ppm, rounded to the nearest: 33.3% is 333'000 ppm although 33.3 * 10'000
// is a hair below that in binary floating point. Outside [0, 100] (and NaN) it is clamped.
constexpr uint32_t percent_to_ppm(double percent) noexcept {
  if (!(percent > 0.0)) return 0;
  if (percent >= 100.0) return kPpmWhole;
  return static_cast<uint32_t>(percent * kPpmPerPercent + 0.5);
}

constexpr double ppm_to_percent(uint32_t ppm) noexcept { return ppm / static_cast<double>(kPpmPerPercent); }

// `ppm` millionths of `total` bytes, rounded down (a quota never grants more than its
// fraction); exact for every card size, in integers.
constexpr uint64_t ppm_of_bytes(uint64_t total, uint32_t ppm) noexcept {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(total) * ppm / kPpmWhole);
}

// A percentage of `total` bytes: through ppm, as a quota the segment carries in ppm is
// resolved, so that both ways of writing the same quota give the same bytes.
constexpr uint64_t percent_of_bytes(uint64_t total, double percent) noexcept {
  return ppm_of_bytes(total, percent_to_ppm(percent));
}

}  // namespace cuslice
