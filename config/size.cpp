#include "size.h"

#include <cmath>

#include "ppm.h"

namespace cuslice {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

struct Unit {
  const char* name;
  double factor;
};
constexpr Unit kUnits[] = {
    {"b", 1.0},
    {"kb", 1e3},        {"mb", 1e6},        {"gb", 1e9},          {"tb", 1e12},
    {"kib", 1024.0},    {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0},
};

}  // namespace

uint64_t SizeSpec::resolve(uint64_t device_total) const {
  if (kind == Kind::kBytes) return bytes;
  return percent_of_bytes(device_total, percent);
}

bool parse_size(std::string_view text, SizeSpec& out, const char** why) {
  static const char* kDummy;
  if (why == nullptr) why = &kDummy;
  text = trim(text);
  if (text.empty()) {
    *why = "empty size";
    return false;
  }
  // Number: digits with at most one '.', parsed by hand (strtod needs a NUL-terminated copy
  // and honours the locale).
  size_t i = 0;
  double integer = 0, fraction = 0, scale = 1;
  bool digits = false, dot = false;
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (c >= '0' && c <= '9') {
      digits = true;
      if (dot) {
        scale /= 10;
        fraction += (c - '0') * scale;
      } else {
        integer = integer * 10 + (c - '0');
      }
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
  }
  if (!digits) {
    *why = "a size starts with a number, e.g. 4GiB, 4096MiB or 25%";
    return false;
  }
  const double value = integer + fraction;
  std::string_view unit = trim(text.substr(i));
  if (unit == "%") {
    if (!(value > 0.0 && value <= 100.0)) {
      *why = "a percentage must be above 0 and at most 100";
      return false;
    }
    out.kind = SizeSpec::Kind::kPercent;
    out.percent = value;
    out.bytes = 0;
    return true;
  }
  double factor = 0;
  if (unit.empty()) {
    factor = 1.0;
  } else {
    for (const Unit& u : kUnits)
      if (iequals(unit, u.name)) factor = u.factor;
  }
  if (factor == 0) {
    *why = "unknown unit: use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB or %";
    return false;
  }
  const double bytes = std::floor(value * factor);
  if (!(bytes < 1.8e19)) {
    *why = "size too large";
    return false;
  }
  out.kind = SizeSpec::Kind::kBytes;
  out.bytes = static_cast<uint64_t>(bytes);
  out.percent = 0;
  return true;
}

}  // namespace cuslice
