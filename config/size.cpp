// The one parser of sizes, durations and percentages (size.h): exact integer arithmetic, no
// allocation, no exceptions, static reasons.
#include "config/size.h"

#include "protocol/ppm.h"

namespace cuslice {
namespace {

using u128 = unsigned __int128;

constexpr uint64_t kMaxFractionDigits = 9;
constexpr uint64_t kPow10[] = {1,         10,         100,         1'000,        10'000,
                               100'000,   1'000'000,  10'000'000,  100'000'000,  1'000'000'000};

// The messages. Macros so that each reason and the list of forms make one static string.
#define CUSLICE_SIZE_HELP \
  "write a number and a unit: 4GiB or 4Gi (4*2^30 bytes), 4096MiB, 4G or 4GB (decimal: 4*10^9 bytes), 512B, or 25%"
#define CUSLICE_BYTES_HELP \
  "write a number and a unit: 4GiB or 4Gi (4*2^30 bytes), 4096MiB, 4G or 4GB (decimal: 4*10^9 bytes) or 512B"
#define CUSLICE_DURATION_HELP "write a number and a unit: 20ms, 1.5s, 500us or 500ns"
#define CUSLICE_PERCENT_HELP "write a number above 0 and at most 100 followed by %, e.g. 60% or 12.5%"

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool fail(const char** why, const char* reason) {
  if (why != nullptr) *why = reason;
  return false;
}

// A plain decimal at the start of a text: digits, then optionally '.' and 1 to 9 digits.
struct Decimal {
  uint64_t integer = 0;    // the digits before the point
  uint64_t fraction = 0;   // the digits after it, as an integer
  uint64_t digits = 0;     // how many digits after it
  std::string_view unit;   // the rest of the text
};

enum class NumberProblem { kNone, kNoNumber, kSign, kTooLarge, kBadPoint, kTooPrecise };

// The digits from text[i] on; kTooLarge when they do not fit in 64 bits (all of them are read
// all the same, so that the message reports the number whole).
NumberProblem read_integer(std::string_view text, size_t& i, uint64_t& integer) {
  bool too_large = false;
  for (; i < text.size() && is_digit(text[i]); ++i) {
    const uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (integer > (UINT64_MAX - digit) / 10) too_large = true;
    else integer = integer * 10 + digit;
  }
  return too_large ? NumberProblem::kTooLarge : NumberProblem::kNone;
}

// The digits after the point at text[i - 1].
NumberProblem read_fraction(std::string_view text, size_t& i, Decimal& d) {
  if (i == text.size() || !is_digit(text[i])) return NumberProblem::kBadPoint;
  for (; i < text.size() && is_digit(text[i]); ++i) {
    if (d.digits == kMaxFractionDigits) return NumberProblem::kTooPrecise;
    d.fraction = d.fraction * 10 + static_cast<uint64_t>(text[i] - '0');
    ++d.digits;
  }
  return NumberProblem::kNone;
}

NumberProblem read_decimal(std::string_view text, Decimal& d) {
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) return NumberProblem::kSign;
  if (text.empty() || !is_digit(text[0])) return NumberProblem::kNoNumber;
  size_t i = 0;
  if (const NumberProblem p = read_integer(text, i, d.integer); p != NumberProblem::kNone) return p;
  if (i < text.size() && text[i] == '.') {
    ++i;
    if (const NumberProblem p = read_fraction(text, i, d); p != NumberProblem::kNone) return p;
  }
  d.unit = text.substr(i);
  return NumberProblem::kNone;
}

// value * factor, rounded down; false when it does not fit in 64 bits.
bool scale(const Decimal& d, uint64_t factor, uint64_t limit, uint64_t& out) {
  const u128 whole = static_cast<u128>(d.integer) * factor;
  const u128 part = static_cast<u128>(d.fraction) * factor / kPow10[d.digits];
  const u128 total = whole + part;  // both below 2^124: no overflow in 128 bits
  if (total > limit) return false;
  out = static_cast<uint64_t>(total);
  return true;
}

struct Unit {
  std::string_view name;
  uint64_t factor;
};

constexpr uint64_t kKi = 1024;
constexpr Unit kSizeUnits[] = {
    {"B", 1},
    {"k", 1'000},          {"K", 1'000},          {"kB", 1'000},         {"KB", 1'000},
    {"M", 1'000'000},      {"MB", 1'000'000},     {"G", 1'000'000'000},  {"GB", 1'000'000'000},
    {"T", 1'000'000'000'000},                     {"TB", 1'000'000'000'000},
    {"P", 1'000'000'000'000'000},                 {"PB", 1'000'000'000'000'000},
    {"E", 1'000'000'000'000'000'000},             {"EB", 1'000'000'000'000'000'000},
    {"Ki", kKi},           {"KiB", kKi},          {"Mi", kKi * kKi},     {"MiB", kKi * kKi},
    {"Gi", kKi * kKi * kKi},                      {"GiB", kKi * kKi * kKi},
    {"Ti", kKi * kKi * kKi * kKi},                {"TiB", kKi * kKi * kKi * kKi},
    {"Pi", kKi * kKi * kKi * kKi * kKi},          {"PiB", kKi * kKi * kKi * kKi * kKi},
    {"Ei", kKi * kKi * kKi * kKi * kKi * kKi},    {"EiB", kKi * kKi * kKi * kKi * kKi * kKi},
};

constexpr Unit kDurationUnits[] = {
    {"ns", 1}, {"us", 1'000}, {"\xC2\xB5s", 1'000} /* µs, MICRO SIGN */, {"\xCE\xBCs", 1'000} /* μs, GREEK MU */,
    {"ms", 1'000'000}, {"s", 1'000'000'000},
};

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

template <size_t N>
const Unit* find_unit(const Unit (&units)[N], std::string_view name) {
  for (const Unit& u : units)
    if (u.name == name) return &u;
  return nullptr;
}

template <size_t N>
bool known_in_other_case(const Unit (&units)[N], std::string_view name) {
  for (const Unit& u : units)
    if (iequals(u.name, name)) return true;
  return false;
}

bool has_space(std::string_view s) {
  for (char c : s)
    if (is_space(c)) return true;
  return false;
}

// Reasons shared by the three parsers, in the words of each.
struct Messages {
  const char* empty;
  const char* no_number;
  const char* sign;
  const char* too_large;
  const char* bad_point;
  const char* too_precise;
  const char* space;
};

constexpr Messages kSizeMessages = {
    "empty; " CUSLICE_SIZE_HELP,
    "does not start with a number; " CUSLICE_SIZE_HELP,
    "a size has no sign; " CUSLICE_SIZE_HELP,
    "too large: a size is at most 2^64-1 bytes (16 EiB)",
    "a decimal point must be followed by digits; " CUSLICE_SIZE_HELP,
    "at most 9 digits after the decimal point",
    "no space inside a size; " CUSLICE_SIZE_HELP,
};
constexpr Messages kDurationMessages = {
    "empty; " CUSLICE_DURATION_HELP,
    "does not start with a number; " CUSLICE_DURATION_HELP,
    "a duration has no sign; " CUSLICE_DURATION_HELP,
    "too long: a duration is at most 9223372036s (292 years)",
    "a decimal point must be followed by digits; " CUSLICE_DURATION_HELP,
    "at most 9 digits after the decimal point",
    "no space inside a duration; " CUSLICE_DURATION_HELP,
};
constexpr Messages kPercentMessages = {
    "empty; " CUSLICE_PERCENT_HELP,
    "does not start with a number; " CUSLICE_PERCENT_HELP,
    "a percentage has no sign; " CUSLICE_PERCENT_HELP,
    "a percentage is above 0% and at most 100%",
    "a decimal point must be followed by digits; " CUSLICE_PERCENT_HELP,
    "at most 9 digits after the decimal point",
    "no space inside a percentage; " CUSLICE_PERCENT_HELP,
};

// Reads the number in front of a trimmed, non-empty text; on failure sets *why.
bool read_number(std::string_view text, Decimal& d, const Messages& m, const char** why) {
  if (text.empty()) return fail(why, m.empty);
  switch (read_decimal(text, d)) {
    case NumberProblem::kNone: break;
    case NumberProblem::kNoNumber: return fail(why, m.no_number);
    case NumberProblem::kSign: return fail(why, m.sign);
    case NumberProblem::kTooLarge: return fail(why, m.too_large);
    case NumberProblem::kBadPoint: return fail(why, m.bad_point);
    case NumberProblem::kTooPrecise: return fail(why, m.too_precise);
  }
  return true;
}

// A space before a unit this parser knows ("4 GiB") is the one thing wrong; otherwise the
// unit is ("4 furlongs").
template <size_t N>
bool fail_on_space(const Decimal& d, const Unit (&units)[N], const Messages& m, const char* unknown, const char** why) {
  const std::string_view unit = trim(d.unit);
  return fail(why, unit == "%" || find_unit(units, unit) != nullptr ? m.space : unknown);
}

// A percentage from a decimal whose unit was "%": (0, 100].
bool to_percent(const Decimal& d, double& out, const char** why) {
  const bool above_zero = d.integer > 0 || d.fraction > 0;
  const bool at_most_100 = d.integer < 100 || (d.integer == 100 && d.fraction == 0);
  if (!above_zero || !at_most_100) return fail(why, "a percentage is above 0% and at most 100%");
  out = static_cast<double>(d.integer) + static_cast<double>(d.fraction) / static_cast<double>(kPow10[d.digits]);
  return true;
}

}  // namespace

uint64_t SizeSpec::resolve(uint64_t device_total) const {
  if (kind == Kind::kBytes) return bytes;
  return percent_of_bytes(device_total, percent);
}

bool parse_size(std::string_view text, SizeSpec& out, const char** why, SizeForms forms) noexcept {
  Decimal d;
  if (!read_number(trim(text), d, kSizeMessages, why)) return false;
  const char* help_unknown = forms.percent ? "unknown unit; " CUSLICE_SIZE_HELP : "unknown unit; " CUSLICE_BYTES_HELP;
  if (has_space(d.unit)) return fail_on_space(d, kSizeUnits, kSizeMessages, help_unknown, why);
  if (d.unit == "%") {
    if (!forms.percent) return fail(why, "a percentage is not accepted here; " CUSLICE_BYTES_HELP);
    double percent = 0;
    if (!to_percent(d, percent, why)) return false;
    out = SizeSpec{SizeSpec::Kind::kPercent, 0, percent};
    return true;
  }
  uint64_t factor = 0;
  if (d.unit.empty()) {
    if (!forms.bare_bytes)
      return fail(why, forms.percent ? "a unit is needed (a bare number is not taken as bytes here); " CUSLICE_SIZE_HELP
                                     : "a unit is needed (a bare number is not taken as bytes here); " CUSLICE_BYTES_HELP);
    if (d.digits > 0) return fail(why, "a byte count is a whole number; " CUSLICE_BYTES_HELP);
    factor = 1;
  } else if (const Unit* u = find_unit(kSizeUnits, d.unit)) {
    factor = u->factor;
  } else if (known_in_other_case(kSizeUnits, d.unit)) {
    return fail(why, "units are case-sensitive: Gi or GiB is 2^30 bytes, G or GB is 10^9 bytes (likewise Ki/k, Mi/M, "
                     "Ti/T); " CUSLICE_SIZE_HELP);
  } else {
    return fail(why, help_unknown);
  }
  uint64_t bytes = 0;
  if (!scale(d, factor, UINT64_MAX, bytes)) return fail(why, kSizeMessages.too_large);
  out = SizeSpec{SizeSpec::Kind::kBytes, bytes, 0.0};
  return true;
}

bool parse_duration(std::string_view text, uint64_t& nanoseconds, const char** why) noexcept {
  Decimal d;
  if (!read_number(trim(text), d, kDurationMessages, why)) return false;
  if (d.unit.empty()) return fail(why, "a unit is needed; " CUSLICE_DURATION_HELP);
  if (has_space(d.unit))
    return fail_on_space(d, kDurationUnits, kDurationMessages, "unknown unit; " CUSLICE_DURATION_HELP, why);
  const Unit* u = find_unit(kDurationUnits, d.unit);
  if (u == nullptr)
    return fail(why, known_in_other_case(kDurationUnits, d.unit)
                         ? "units are lower-case (ns, us, ms, s); " CUSLICE_DURATION_HELP
                         : "unknown unit; " CUSLICE_DURATION_HELP);
  uint64_t ns = 0;
  if (!scale(d, u->factor, kMaxDurationNs, ns)) return fail(why, kDurationMessages.too_large);
  nanoseconds = ns;
  return true;
}

bool parse_percent(std::string_view text, double& percent, const char** why) noexcept {
  Decimal d;
  if (!read_number(trim(text), d, kPercentMessages, why)) return false;
  if (d.unit.empty()) return fail(why, "a percentage is written with %; " CUSLICE_PERCENT_HELP);
  if (has_space(d.unit) && trim(d.unit) == "%") return fail(why, kPercentMessages.space);
  if (d.unit != "%") return fail(why, "not a percentage; " CUSLICE_PERCENT_HELP);
  return to_percent(d, percent, why);
}

}  // namespace cuslice
