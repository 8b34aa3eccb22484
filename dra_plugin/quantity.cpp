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

// A number: digits, then an optional fraction, as mantissa * 10^-fraction_digits.
struct Number {
  unsigned __int128 mantissa = 0;
  int fraction_digits = 0;
};

// The number at the start of `text` (after an optional '+'); `rest` is what follows it.
std::optional<Number> read_number(std::string_view text, std::string_view& rest) {
  size_t i = 0;
  if (i < text.size() && text[i] == '+') ++i;
  Number n;
  bool digits = false, point = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '.' && !point) {
      point = true;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(c))) break;
    digits = true;
    if (n.mantissa > kMax * 10) return std::nullopt;
    n.mantissa = n.mantissa * 10 + static_cast<unsigned>(c - '0');
    if (point) ++n.fraction_digits;
  }
  if (!digits || n.fraction_digits > 9) return std::nullopt;
  rest = text.substr(i);
  return n;
}

struct Scale {
  int base = 10;
  int exponent = 0;
};

// "e<digits>": a decimal exponent of at most 18 or so.
std::optional<Scale> decimal_exponent(std::string_view rest) {
  if (rest.size() < 2 || (rest[0] != 'e' && rest[0] != 'E')) return std::nullopt;
  int e = 0;
  for (size_t k = 1; k < rest.size(); ++k) {
    if (!std::isdigit(static_cast<unsigned char>(rest[k])) || e > 18) return std::nullopt;
    e = e * 10 + (rest[k] - '0');
  }
  return Scale{10, e};
}

// What the suffix `rest` multiplies by: none, one of the table's, P, E, or an exponent.
std::optional<Scale> scale_of(std::string_view rest) {
  if (rest.empty()) return Scale{};
  for (const Suffix& s : kSuffixes)
    if (rest == s.text) return Scale{s.base, s.exponent};
  if (rest == "P" || rest == "E") return Scale{10, rest == "P" ? 15 : 18};  // "Pi" and "Ei" are binary
  return decimal_exponent(rest);
}

// n * base^exponent, rounded up; nullopt when it does not fit 63 bits.
std::optional<uint64_t> scaled(const Number& n, const Scale& scale) {
  unsigned __int128 numerator = n.mantissa, denominator = 1;
  for (int k = 0; k < n.fraction_digits; ++k) denominator *= 10;
  if (scale.base == 2) {
    numerator <<= scale.exponent;
  } else if (scale.exponent >= 0) {
    for (int k = 0; k < scale.exponent; ++k) {
      numerator *= 10;
      if (numerator > kMax * denominator) return std::nullopt;
    }
  } else {
    for (int k = 0; k < -scale.exponent; ++k) denominator *= 10;
  }
  const unsigned __int128 value = (numerator + denominator - 1) / denominator;
  if (value >= kMax) return std::nullopt;
  return static_cast<uint64_t>(value);
}

}  // namespace

std::optional<uint64_t> parse_quantity(std::string_view text) {
  std::string_view rest;
  const std::optional<Number> number = read_number(text, rest);
  if (!number) return std::nullopt;
  const std::optional<Scale> scale = scale_of(rest);
  if (!scale) return std::nullopt;
  return scaled(*number, *scale);
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
