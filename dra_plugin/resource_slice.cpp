#include "dra_plugin/resource_slice.h"

#include <charconv>

#include "dra_plugin/quantity.h"

namespace cuslice::dra {
namespace {

constexpr std::string_view kDevicePrefix = "gpu-";

nlohmann::json capacity(const std::string& value_text, uint64_t min, uint64_t step) {
  // The default is the whole: a request that names no amount gets the whole GPU's.
  return {{"value", value_text},
          {"requestPolicy",
           {{"default", value_text},
            {"validRange", {{"min", binary_quantity(min)}, {"max", value_text}, {"step", binary_quantity(step)}}}}}};
}

}  // namespace

std::string device_name(uint32_t index) { return std::string(kDevicePrefix) + std::to_string(index); }

std::optional<uint32_t> device_index(std::string_view name) {
  if (name.substr(0, kDevicePrefix.size()) != kDevicePrefix) return std::nullopt;
  name.remove_prefix(kDevicePrefix.size());
  uint32_t index = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), index);
  if (ec != std::errc{} || end != name.data() + name.size() || name.empty() || (name.size() > 1 && name[0] == '0'))
    return std::nullopt;
  return index;
}

uint64_t memory_capacity(uint64_t total, const SliceOptions& o) {
  const uint64_t usable = total > o.reserve_memory ? total - o.reserve_memory : 0;
  return o.memory_step == 0 ? usable : usable / o.memory_step * o.memory_step;
}

std::string architecture(std::pair<int, int> cc) {
  switch (cc.first) {
    case 7: return cc.second >= 5 ? "turing" : "volta";
    case 8: return cc.second == 9 ? "ada-lovelace" : "ampere";
    case 9: return "hopper";
    case 10:
    case 12: return "blackwell";
    default: return "";
  }
}

std::optional<std::string> semantic_version(std::string_view text) {
  std::string out;
  int parts = 0;
  while (!text.empty()) {
    const size_t dot = text.find('.');
    const std::string_view part = text.substr(0, dot);
    uint64_t n = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), n);
    if (part.empty() || ec != std::errc{} || end != part.data() + part.size() || ++parts > 3) return std::nullopt;
    out += (out.empty() ? "" : ".") + std::to_string(n);
    if (dot == std::string_view::npos) break;
    text.remove_prefix(dot + 1);
    if (text.empty()) return std::nullopt;
  }
  if (parts == 0) return std::nullopt;
  for (; parts < 3; ++parts) out += ".0";
  return out;
}

std::string slice_name(const std::string& node) { return node + "-" + kDriverName; }

nlohmann::json slice_spec(const SliceOptions& o, const std::vector<node::GpuInfo>& gpus, int64_t pool_generation,
                          uint32_t spatial_gpus) {
  nlohmann::json devices = nlohmann::json::array();
  const std::optional<std::string> driver = semantic_version(o.driver_version);
  for (const node::GpuInfo& g : gpus) {
    nlohmann::json attributes = {{"index", {{"int", g.index}}},
                                 {"uuid", {{"string", g.uuid}}},
                                 {"productName", {{"string", g.name}}},
                                 {"mode", {{"string", g.index < 32 && ((spatial_gpus >> g.index) & 1u) != 0
                                                          ? "spatial"
                                                          : "time-sliced"}}}};
    if (driver) attributes["driverVersion"] = {{"version", *driver}};
    if (g.compute_capability) {
      const auto [major, minor] = *g.compute_capability;
      attributes["cudaComputeCapability"] = {{"version", std::to_string(major) + "." + std::to_string(minor) + ".0"}};
      if (const std::string arch = architecture(*g.compute_capability); !arch.empty())
        attributes["architecture"] = {{"string", arch}};
    }
    const uint64_t memory = memory_capacity(g.memory_total, o);
    if (memory == 0) continue;  // all of it reserved: nothing to hand out
    devices.push_back({{"name", device_name(g.index)},
                       {"allowMultipleAllocations", true},
                       {"attributes", attributes},
                       {"capacity",
                        {{kMemoryCapacity, capacity(binary_quantity(memory), o.memory_step, o.memory_step)},
                         {kComputeCapacity, capacity("100", 1, 1)}}}});
  }
  return {{"driver", kDriverName},
          {"nodeName", o.node},
          {"pool", {{"name", o.node}, {"generation", pool_generation}, {"resourceSliceCount", 1}}},
          {"devices", devices}};
}

}  // namespace cuslice::dra
