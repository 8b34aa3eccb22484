#include "device_plugin/device_ids.h"

#include <fmt/format.h>

#include <charconv>

namespace cuslice::device_plugin {
namespace {

std::optional<uint32_t> parse_number(std::string_view digits) {
  // No sign, no leading zero (one spelling per ID), at most what uint32_t holds.
  if (digits.empty() || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  uint32_t value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return value;
}

}  // namespace

std::string memory_id(std::string_view gpu_uuid, uint32_t unit) {
  return std::string(gpu_uuid) + "-m" + std::to_string(unit);
}

std::optional<MemoryId> parse_memory_id(std::string_view id) {
  const size_t dash = id.rfind("-m");
  if (dash == std::string_view::npos || dash == 0) return std::nullopt;
  const std::optional<uint32_t> unit = parse_number(id.substr(dash + 2));
  if (!unit) return std::nullopt;
  return MemoryId{std::string(id.substr(0, dash)), *unit};
}

std::string compute_id(uint32_t n) { return "c" + std::to_string(n); }

std::optional<uint32_t> parse_compute_id(std::string_view id) {
  if (id.size() < 2 || id[0] != 'c') return std::nullopt;
  return parse_number(id.substr(1));
}

std::string gib_text(uint64_t bytes) {
  return fmt::format("{:g} GiB", static_cast<double>(bytes) / static_cast<double>(kMemoryUnit));
}

}  // namespace cuslice::device_plugin
