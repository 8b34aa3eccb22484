#include "scheduler/preemption/host_memory.h"

#include <charconv>
#include <fstream>
#include <sstream>

namespace cuslice {

std::optional<uint64_t> parse_mem_available(std::string_view meminfo) {
  constexpr std::string_view kKey = "MemAvailable:";
  size_t at = 0;
  while (at < meminfo.size()) {
    size_t end = meminfo.find('\n', at);
    if (end == std::string_view::npos) end = meminfo.size();
    std::string_view line = meminfo.substr(at, end - at);
    at = end + 1;
    if (line.substr(0, kKey.size()) != kKey) continue;
    line.remove_prefix(kKey.size());
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    uint64_t kib = 0;
    const auto [rest, error] = std::from_chars(line.data(), line.data() + line.size(), kib);
    if (error != std::errc() || rest == line.data()) return std::nullopt;
    std::string_view unit(rest, static_cast<size_t>(line.data() + line.size() - rest));
    while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
    if (unit != "kB" || kib > UINT64_MAX / 1024) return std::nullopt;  // the kernel writes kB (KiB)
    return kib * 1024;
  }
  return std::nullopt;
}

std::optional<uint64_t> read_mem_available(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return parse_mem_available(text.str());
}

}  // namespace cuslice
