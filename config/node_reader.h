// Reads one YAML node as the kind of value a key holds: a mapping of known keys, a single
// value, a duration, a size, a percentage, a whole number, an id or a boolean. A node is read
// only once its type is checked, since yaml-cpp throws on a wrong one. A problem goes to the
// error list at the node's position and the value is then absent: the caller keeps its
// default and reads on, so that one run reports every mistake in the file.
//
// Internal to cuslice_config. Knows no key's meaning: which key is read as what, and where
// its value goes, is the parser's (config_parser.cpp); rules across values are
// config_validation's.
#pragma once

#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include "config/config_errors.h"
#include "config/size.h"

namespace cuslice {

class NodeReader {
 public:
  explicit NodeReader(ConfigErrors& errors) : errors_(errors) {}

  bool expect_map(const YAML::Node& node, const std::string& what);
  bool expect_scalar(const YAML::Node& node, const std::string& key);
  // Every key of `map` is one of `allowed`, and none is given twice.
  void check_keys(const YAML::Node& map, std::initializer_list<const char*> allowed);

  // Above zero.
  std::optional<std::chrono::nanoseconds> duration(const YAML::Node& node, const std::string& key);
  // Within [min, max].
  std::optional<std::chrono::nanoseconds> bounded_duration(const YAML::Node& node, const std::string& key,
                                                            std::chrono::nanoseconds min, std::chrono::nanoseconds max);
  // Bytes (a bare number too) or a percentage of the card; bytes above zero.
  std::optional<SizeSpec> size(const YAML::Node& node, const std::string& key);
  // A size in bytes only; a percentage is refused with `not_percent`.
  std::optional<uint64_t> bytes(const YAML::Node& node, const std::string& key, const std::string& not_percent);
  // In (0, 100], written with its '%'.
  std::optional<double> percent(const YAML::Node& node, const std::string& key);
  // Whether the segment can hold `percent` (see kMinPercent); says so when it cannot.
  bool representable_percent(const YAML::Node& node, const std::string& key, double percent);
  // In [min, max], written in decimal digits only; `what` names the range in the message.
  std::optional<uint64_t> whole_number(const YAML::Node& node, const std::string& key, uint64_t min, uint64_t max,
                                       const std::string& what);
  // A uid or gid: 0 to kMaxId.
  std::optional<uint32_t> id(const YAML::Node& node, const std::string& key);
  std::optional<bool> boolean(const YAML::Node& node, const std::string& key);

 private:
  ConfigErrors& errors_;
};

}  // namespace cuslice
