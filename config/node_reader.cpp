// Typed reads of single YAML nodes (node_reader.h). The spellings of sizes, durations and
// percentages are size.h's; this file adds the YAML shape, the ranges and the messages.
#include "config/node_reader.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <map>

namespace cuslice {
namespace {

// A bound as a message writes it: in the largest unit that keeps it whole.
std::string format_duration(std::chrono::nanoseconds d) {
  if (d % std::chrono::seconds(1) == std::chrono::nanoseconds(0))
    return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count()) + "s";
  if (d % std::chrono::milliseconds(1) == std::chrono::nanoseconds(0))
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + "ms";
  return std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(d).count()) + "us";
}

// `node`'s text as `parse` reads it (parse(text, value, &why)), or absent when `parse` refuses
// it, with what it says of it: "bad <kind> '<text>' for `<key>`: <why>".
template <typename T, typename Parse>
std::optional<T> parsed(ConfigErrors& errors, const YAML::Node& node, const std::string& key, const char* kind,
                        Parse parse) {
  T value{};
  const char* why = nullptr;
  if (parse(node.Scalar(), value, &why)) return value;
  errors.add(node, std::string("bad ") + kind + " " + quoted(node) + " for `" + key + "`: " + why);
  return std::nullopt;
}

}  // namespace

bool NodeReader::expect_map(const YAML::Node& node, const std::string& what) {
  if (node.IsMap()) return true;
  errors_.add(node, what + " must be a mapping of `key: value`");
  return false;
}

bool NodeReader::expect_scalar(const YAML::Node& node, const std::string& key) {
  if (node.IsScalar()) return true;
  errors_.add(node, "`" + key + "` must be a single value");
  return false;
}

// A duplicate is refused because yaml-cpp keeps both entries and its lookup returns the
// first, so `memory: 1GiB` followed by `memory: 100GiB` would silently mean 1GiB.
void NodeReader::check_keys(const YAML::Node& map, std::initializer_list<const char*> allowed) {
  std::map<std::string, YAML::Mark> seen;
  for (const auto& entry : map) {
    if (!entry.first.IsScalar()) {
      errors_.add(entry.first, "a key must be a plain word, not a list or a mapping");
      continue;
    }
    const std::string& key = entry.first.Scalar();
    const bool known = std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return key == a; });
    if (!known) {
      std::string list;
      for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
      errors_.add(entry.first, "unknown key " + quoted(key) + " (expected one of: " + list + ")");
      continue;
    }
    const auto [first, inserted] = seen.emplace(key, entry.first.Mark());
    if (!inserted) {
      errors_.add(entry.first, "duplicate key `" + key + "` (first given at line " +
                                   std::to_string(first->second.line + 1) + ", column " +
                                   std::to_string(first->second.column + 1) + ")");
    }
  }
}

std::optional<std::chrono::nanoseconds> NodeReader::bounded_duration(const YAML::Node& node, const std::string& key,
                                                                      std::chrono::nanoseconds min,
                                                                      std::chrono::nanoseconds max) {
  const std::optional<std::chrono::nanoseconds> value = duration(node, key);
  if (value && (*value < min || *value > max)) {
    errors_.add(node, "`" + key + "` " + quoted(node) + " is out of range: from " + format_duration(min) + " to " +
                          format_duration(max));
    return std::nullopt;
  }
  return value;
}

bool NodeReader::representable_percent(const YAML::Node& node, const std::string& key, double percent) {
  if (percent >= kMinPercent) return true;
  errors_.add(node, "`" + key + "` " + quoted(node) + " is below 0.0001%, the finest percentage the scheduler holds" +
                        (key == "memory" ? ": write a size in bytes for a smaller quota" : ""));
  return false;
}

std::optional<std::chrono::nanoseconds> NodeReader::duration(const YAML::Node& node, const std::string& key) {
  if (!expect_scalar(node, key)) return std::nullopt;
  const std::optional<uint64_t> ns = parsed<uint64_t>(errors_, node, key, "duration", parse_duration);
  if (!ns) return std::nullopt;
  if (*ns == 0) {
    errors_.add(node, "`" + key + "` must be above zero");
    return std::nullopt;
  }
  return std::chrono::nanoseconds(*ns);  // at most kMaxDurationNs: fits
}

std::optional<SizeSpec> NodeReader::size(const YAML::Node& node, const std::string& key) {
  if (!expect_scalar(node, key)) return std::nullopt;
  // A bare number is a byte count, as in a Kubernetes resource quantity.
  const std::optional<SizeSpec> spec =
      parsed<SizeSpec>(errors_, node, key, "size", [](std::string_view text, SizeSpec& out, const char** why) {
        return parse_size(text, out, why, SizeForms{.bare_bytes = true, .percent = true});
      });
  if (spec && spec->kind == SizeSpec::Kind::kBytes && spec->bytes == 0) {
    errors_.add(node, "`" + key + "` must be above zero");
    return std::nullopt;
  }
  return spec;
}

std::optional<uint64_t> NodeReader::bytes(const YAML::Node& node, const std::string& key,
                                          const std::string& not_percent) {
  const std::optional<SizeSpec> spec = size(node, key);
  if (!spec) return std::nullopt;
  if (spec->kind == SizeSpec::Kind::kPercent) {
    errors_.add(node, not_percent);
    return std::nullopt;
  }
  return spec->bytes;
}

std::optional<double> NodeReader::percent(const YAML::Node& node, const std::string& key) {
  if (!expect_scalar(node, key)) return std::nullopt;
  return parsed<double>(errors_, node, key, "percentage", parse_percent);
}

std::optional<uint64_t> NodeReader::whole_number(const YAML::Node& node, const std::string& key, uint64_t min,
                                                 uint64_t max, const std::string& what) {
  if (!expect_scalar(node, key)) return std::nullopt;
  const std::string& text = node.Scalar();
  const bool digits = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) {
    const bool negative = text.size() > 1 && text[0] == '-' &&
                          std::all_of(text.begin() + 1, text.end(), [](char c) { return c >= '0' && c <= '9'; });
    errors_.add(node, "bad `" + key + "` " + quoted(text) + ": " + (negative ? "cannot be negative; " : "") +
                          "expected " + what);
    return std::nullopt;
  }
  // Leading zeros aside, more than 20 digits cannot fit; strtoull says so for fewer.
  const size_t first = std::min(text.find_first_not_of('0'), text.size());
  errno = 0;
  const unsigned long long value = text.size() - first > 20 ? ULLONG_MAX : std::strtoull(text.c_str(), nullptr, 10);
  if (text.size() - first > 20 || errno == ERANGE || value < min || value > max) {
    errors_.add(node, "bad `" + key + "` " + quoted(text) + ": expected " + what);
    return std::nullopt;
  }
  return value;
}

std::optional<uint32_t> NodeReader::id(const YAML::Node& node, const std::string& key) {
  const auto value = whole_number(node, key, 0, kMaxId, "a numeric id from 0 to " + std::to_string(kMaxId));
  if (!value) return std::nullopt;
  return static_cast<uint32_t>(*value);
}

std::optional<bool> NodeReader::boolean(const YAML::Node& node, const std::string& key) {
  if (!expect_scalar(node, key)) return std::nullopt;
  bool value = false;
  if (!YAML::convert<bool>::decode(node, value)) {
    errors_.add(node, "bad `" + key + "` " + quoted(node) + ": expected true or false");
    return std::nullopt;
  }
  return value;
}

}  // namespace cuslice
