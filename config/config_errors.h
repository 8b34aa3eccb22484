// The errors of one configuration file: each problem at its file, line and column, listed in
// file order and cut short at kMaxConfigErrors, and how a message quotes the input (quoted(),
// built on excerpt()). The parser and the rules across tenants both report here.
//
// Internal to cuslice_config: other code includes tenant_config.h. Knows YAML only for its
// positions and the text it quotes; never decides what is an error.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <string_view>
#include <vector>

#include "config/tenant_config.h"

namespace cuslice {

// An error at `mark`, yaml-cpp's 0-based position; a null mark: the whole file (line 0).
ConfigError error_at(const std::string& file, const YAML::Mark& mark, std::string message);

// `text` as a message quotes it: its excerpt() in backquotes.
std::string quoted(std::string_view text);
std::string quoted(const YAML::Node& node);

class ConfigErrors {
 public:
  explicit ConfigErrors(std::string file) : file_(std::move(file)) {}

  void add(const YAML::Mark& mark, std::string message);
  void add(const YAML::Node& node, std::string message) { add(node.Mark(), std::move(message)); }

  // Every error in file order (a stable sort: errors at one position keep the order they were
  // found in), at most kMaxConfigErrors, then one saying how many were left out.
  std::vector<ConfigError> take();

 private:
  std::string file_;
  std::vector<ConfigError> errors_;
};

}  // namespace cuslice
