// Sizes, durations and percentages as people write them, the one parser of all three: the
// hook's variables (CUSLICE_MEMORY_LIMIT, CUSLICE_MAX_QUEUED, ...), the scheduler's YAML and
// the `cuslice` flags all call these functions, so every place accepts exactly the same
// spellings and refuses the rest with the same message.
//
//   size:      4GiB 4Gi 4096MiB 512KiB (powers of 1024: Ki Mi Gi Ti Pi Ei, with or without B)
//              4G 4GB 500M 500MB 4k (powers of 1000: k/K M G T P E, with or without B; 4G is
//              4*10^9 bytes, as in Kubernetes, not 4 GiB as in `docker --memory 4g`)
//              512B, and 25% (of the card) where a share of the card makes sense.
//              A bare number (1073741824) is a byte count only where the caller says so.
//   duration:  20ms 1.5s 500us 500µs 500ns. Never a bare number.
//   percent:   60% 12.5%, above 0 and at most 100.
//
// Numbers are plain decimals: digits, optionally a point and at most 9 more digits. No
// sign, exponent, hex, "inf" or space inside; units are case-sensitive (m is not M).
// Fractions are rounded down to a whole byte or nanosecond. Arithmetic is exact integer
// arithmetic with overflow checks: any text gets a value or a reason, never undefined
// behaviour.
//
// No allocation, no exceptions, no locale, no libc calls: the hook parses while the
// application starts. A reason (`why`) is a static string that says what is wrong and
// lists the accepted forms; callers put the variable or flag and the value in front.
#pragma once

#include <cstdint>
#include <string_view>

namespace cuslice {

struct SizeSpec {
  enum class Kind { kBytes, kPercent };
  Kind kind = Kind::kBytes;
  uint64_t bytes = 0;     // when kind == kBytes
  double percent = 0.0;   // when kind == kPercent: (0, 100]

  // The byte count this spec means on a device of `device_total` bytes.
  uint64_t resolve(uint64_t device_total) const;
};

// The forms a size may take beyond a number with a byte unit.
struct SizeForms {
  bool bare_bytes = false;  // "1073741824": a number without a unit is a byte count
  bool percent = true;      // "25%": a share of the card
};

// The forms, for help texts and messages.
inline constexpr const char* kSizeForms =
    "4GiB or 4Gi (4*2^30 bytes), 4096MiB, 4G or 4GB (decimal: 4*10^9 bytes), 512B, or 25% of the card";
inline constexpr const char* kDurationForms = "20ms, 1.5s, 500us or 500ns";
inline constexpr const char* kPercentForms = "60% or 12.5% (above 0%, at most 100%)";

// On failure these return false, leave `out` unchanged and set *why (when `why` is not
// null) to a static string saying what is wrong and what is accepted.
bool parse_size(std::string_view text, SizeSpec& out, const char** why, SizeForms forms = {}) noexcept;
// Zero ("0us") is a valid duration; callers that need a positive one say so.
bool parse_duration(std::string_view text, uint64_t& nanoseconds, const char** why) noexcept;
bool parse_percent(std::string_view text, double& percent, const char** why) noexcept;

// The largest duration parse_duration returns: INT64_MAX ns (292 years), so that every
// result fits std::chrono::nanoseconds.
inline constexpr uint64_t kMaxDurationNs = 9'223'372'036'854'775'807ull;

}  // namespace cuslice
