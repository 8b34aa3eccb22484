#include "dra_plugin/quantity.h"

#include <array>
#include <cctype>

namespace cuslice::dra {
namespace {

struct Suffix {
  std::string_view text;
  int base;      // 2 or 10
  int exponent;  // of the base
};

constexpr std::array<Suffix, 13> kSuffixes{{{"Ki", 2, 10},
                                            {"Mi", 2, 20},
                                            {"Gi", 2, 30},
                                            {"Ti", 2, 40},
                                            {"Pi", 2, 50},
                                            {"Ei", 2, 60},
                                            {"n", 10, -9},
                                            {"u", 10, -6},
                                            {"m", 10, -3},
                                            {"k", 10, 3},
                                            {"M", 10, 6},
                                            {"G", 10, 9},
                                            {"T", 10, 12}}};

constexpr unsigned __int128 kMax = (unsigned __int128)1 << 63;

}  // namespace

std::optional<uint64_t> parse_quantity(std::string_view text) {
  size_t i = 0;
  if (i < text.size() && text[i] == '+') ++i;
  // Digits, then an optional fraction: the number as mantissa * 10^-fraction_digits.
  unsigned __int128 mantissa = 0;
  int fraction_digits = 0;
  bool digits = false, point = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '.' && !point) {
      point = true;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(c))) break;
    digits = true;
    if (mantissa > kMax * 10) return std::nullopt;
    mantissa = mantissa * 10 + static_cast<unsigned>(c - '0');
    if (point) ++fraction_digits;
  }
  if (!digits || fraction_digits > 9) return std::nullopt;
  const std::string_view rest = text.substr(i);
  int base = 10, exponent = 0;
  if (!rest.empty()) {
    bool known = false;
    for (const Suffix& s : kSuffixes)
      if (rest == s.text) {
        base = s.base;
        exponent = s.exponent;
        known = true;
      }
    if (rest == "P" || rest == "E") {  // after the table: "Pi" and "Ei" are binary
      exponent = rest == "P" ? 15 : 18;
      known = true;
    }
    if (!known && (rest[0] == 'e' || rest[0] == 'E') && rest.size() > 1) {
      int e = 0;
      for (size_t k = 1; k < rest.size(); ++k) {
        if (!std::isdigit(static_cast<unsigned char>(rest[k])) || e > 18) return std::nullopt;
        e = e * 10 + (rest[k] - '0');
      }
      exponent = e;
      known = true;
    }
    if (!known) return std::nullopt;
  }
  // value = mantissa * base^exponent / 10^fraction_digits, rounded up.
  unsigned __int128 numerator = mantissa, denominator = 1;
  for (int k = 0; k < fraction_digits; ++k) denominator *= 10;
  if (base == 2) {
    numerator <<= exponent;
  } else if (exponent >= 0) {
    for (int k = 0; k < exponent; ++k) {
      numerator *= 10;
      if (numerator > kMax * denominator) return std::nullopt;
    }
  } else {
    for (int k = 0; k < -exponent; ++k) denominator *= 10;
  }
  const unsigned __int128 value = (numerator + denominator - 1) / denominator;
  if (value >= kMax) return std::nullopt;
  return static_cast<uint64_t>(value);
}

std::string binary_quantity(uint64_t value) {
  static constexpr std::array<std::string_view, 6> kNames{"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  int shift = 0;
  while (value != 0 && shift < 6 && value % 1024 == 0) {
    value /= 1024;
    ++shift;
  }
  return std::to_string(value) + (shift == 0 ? "" : std::string(kNames[shift - 1]));
}

}  // namespace cuslice::dra
