// The error list and its messages (config_errors.h), with ConfigError::to_string() and
// excerpt() of tenant_config.h. Formats and orders errors; finds none itself.
#include "config/config_errors.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

namespace cuslice {

ConfigError error_at(const std::string& file, const YAML::Mark& mark, std::string message) {
  // yaml-cpp marks are 0-based, and a null mark (-1) means "no position".
  const int line = mark.line >= 0 ? mark.line + 1 : 0;
  const int column = line > 0 ? mark.column + 1 : 0;
  // Quoted input is escaped where it is quoted; this only guards the one-line promise
  // against a message that forgot to (yaml-cpp's own, say).
  std::replace_if(message.begin(), message.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  return {file, line, column, std::move(message)};
}

std::string quoted(std::string_view text) { return "`" + excerpt(text) + "`"; }
std::string quoted(const YAML::Node& node) { return quoted(node.Scalar()); }

void ConfigErrors::add(const YAML::Mark& mark, std::string message) {
  errors_.push_back(error_at(file_, mark, std::move(message)));
}

std::vector<ConfigError> ConfigErrors::take() {
  std::stable_sort(errors_.begin(), errors_.end(), [](const ConfigError& a, const ConfigError& b) {
    return std::tie(a.line, a.column) < std::tie(b.line, b.column);
  });
  if (errors_.size() > kMaxConfigErrors) {
    const size_t left_out = errors_.size() - kMaxConfigErrors;
    errors_.resize(kMaxConfigErrors);
    errors_.push_back({file_, 0, 0, std::to_string(left_out) + " more errors not shown"});
  }
  return std::move(errors_);
}

std::string excerpt(std::string_view text) {
  size_t cut = std::min(text.size(), kMaxExcerpt);
  // Not inside a UTF-8 sequence: its lead byte would be escaped as invalid.
  if (cut < text.size()) {
    for (size_t back = 0; back < 3 && cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80; ++back) --cut;
  }
  // fmt's debug format escapes what is not printable; drop its enclosing quotes.
  std::string escaped = fmt::format("{:?}", text.substr(0, cut));
  escaped = escaped.substr(1, escaped.size() - 2);
  if (cut < text.size()) escaped += "...";
  return escaped;
}

std::string ConfigError::to_string() const {
  if (line <= 0) return file + ": " + message;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

}  // namespace cuslice
