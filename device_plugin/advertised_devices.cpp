// The device lists ListAndWatch advertises (advertised_devices.h).
#include "device_plugin/advertised_devices.h"

#include <algorithm>
#include <numeric>
#include <optional>

#include "device_plugin/compute_room.h"
#include "device_plugin/device_ids.h"

namespace cuslice::device_plugin {
namespace {

// The highest level all GPUs can be cut to within the budget, then what is left of it one
// unit each to the GPUs above the level, the lower index first.
std::vector<uint32_t> level_free(const std::vector<uint32_t>& free, uint32_t budget) {
  if (free.empty()) return {};
  const auto below = [&](uint32_t level) {
    uint64_t sum = 0;
    for (uint32_t f : free) sum += std::min(f, level);
    return sum;
  };
  uint32_t level = 0;
  while (below(level + 1) <= budget && level < *std::max_element(free.begin(), free.end())) ++level;
  std::vector<uint32_t> out(free.size());
  uint64_t left = budget - below(level);
  for (size_t i = 0; i < free.size(); ++i) {
    out[i] = std::min(free[i], level);
    if (free[i] > level && left > 0) ++out[i], --left;
  }
  return out;
}

// Binpack: whole, within the budget, the GPU it fills next (the least free) and the one a
// large request needs (the most free); the others level.
std::vector<uint32_t> binpack_free(const std::vector<uint32_t>& free, uint32_t budget) {
  std::optional<size_t> fill, large;
  for (size_t i = 0; i < free.size(); ++i)
    if (free[i] > 0 && (!fill || free[i] < free[*fill])) fill = i;
  for (size_t i = 0; i < free.size(); ++i)
    if (fill && i != *fill && free[i] > 0 && (!large || free[i] > free[*large])) large = i;
  std::vector<uint32_t> out(free.size(), 0), rest = free;
  for (const std::optional<size_t>& whole : {fill, large}) {
    if (!whole) continue;
    out[*whole] = std::min(free[*whole], budget);
    budget -= out[*whole];
    rest[*whole] = 0;
  }
  const std::vector<uint32_t> levelled = level_free(rest, budget);
  for (size_t i = 0; i < free.size(); ++i) out[i] += levelled[i];
  return out;
}

// The free units of `g`: below its capacity and held by no allocation.
std::vector<uint32_t> free_units(const GpuTable& gpus, const AllocationBook& book, const Gpu& g) {
  const std::set<uint32_t> used = book.used_units(g.index);
  std::vector<uint32_t> out;
  for (uint32_t u = 0; u < gpus.capacity_units(g); ++u)
    if (!used.count(u)) out.push_back(u);
  return out;
}

}  // namespace

std::vector<uint32_t> advertised_free(const std::vector<uint32_t>& free, uint32_t budget, PlacementPolicy policy) {
  if (std::accumulate(free.begin(), free.end(), uint64_t{0}) <= budget) return free;
  if (policy == PlacementPolicy::kSpread) return level_free(free, budget);
  // Binpack first gives every GPU with free units a floor of a half budget's fair part: the
  // GPU a container goes to is chosen among the units offered, and a GPU offering none could
  // never take the container whose compute fits only there.
  const auto with_free = static_cast<uint32_t>(std::count_if(free.begin(), free.end(), [](uint32_t f) { return f > 0; }));
  const uint32_t floor = with_free > 0 ? budget / (2 * with_free) : 0;
  std::vector<uint32_t> out(free.size()), rest(free.size());
  for (size_t i = 0; i < free.size(); ++i) {
    out[i] = std::min(free[i], floor);
    rest[i] = free[i] - out[i];
    budget -= out[i];
  }
  const std::vector<uint32_t> packed = binpack_free(rest, budget);
  for (size_t i = 0; i < free.size(); ++i) out[i] += packed[i];
  return out;
}

std::vector<Device> memory_devices(const GpuTable& gpus, const AllocationBook& book, bool scheduler_reachable,
                                   const AdvertiseLimits& limits) {
  std::vector<std::vector<uint32_t>> free;
  std::vector<uint32_t> free_count;
  for (const Gpu& g : gpus.all()) {
    free.push_back(free_units(gpus, book, g));
    // A GPU that can take no further container advertises none of its free units.
    const bool room = g.present && compute_on(book, g.index).free() >= kMemoryOnlyPercent;
    free_count.push_back(room ? static_cast<uint32_t>(free.back().size()) : 0);
  }
  const std::vector<uint32_t> healthy_free = advertised_free(free_count, limits.tenant_room, limits.policy);
  std::vector<Device> out;
  for (size_t k = 0; k < gpus.all().size(); ++k) {
    const Gpu& g = gpus.all()[k];
    const std::set<uint32_t> used = book.used_units(g.index);
    uint32_t listed = gpus.capacity_units(g);
    if (!used.empty()) listed = std::max(listed, *used.rbegin() + 1);
    const bool usable = g.present && scheduler_reachable;
    // Free units are healthy from the lowest up, so that the list changes little.
    const std::set<uint32_t> offered(free[k].begin(), free[k].begin() + healthy_free[k]);
    for (uint32_t u = 0; u < listed; ++u)
      out.push_back({memory_id(g.uuid, u), usable && (used.count(u) > 0 || offered.count(u) > 0)});
  }
  return out;
}

std::vector<Device> compute_devices(const GpuTable& gpus, bool scheduler_reachable) {
  std::vector<Device> out;
  uint32_t n = 0;
  for (const Gpu& g : gpus.all())
    for (uint32_t i = 0; i < kComputePerGpu; ++i) out.push_back({compute_id(n++), g.present && scheduler_reachable});
  return out;
}

}  // namespace cuslice::device_plugin
