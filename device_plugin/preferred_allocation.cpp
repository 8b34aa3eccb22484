// GetPreferredAllocation's choices (preferred_allocation.h).
#include "device_plugin/preferred_allocation.h"

#include <cstdint>
#include <map>
#include <optional>
#include <set>

#include "device_plugin/compute_room.h"
#include "device_plugin/device_ids.h"

namespace cuslice::device_plugin {

namespace {

// The units each GPU offers (by UUID), must_include's included; `pinned`: the GPU
// must_include names, if any. False when must_include cannot be one container's memory.
bool offered_units(const GpuTable& gpus, const std::vector<std::string>& available,
                   const std::vector<std::string>& must_include, std::map<std::string, std::set<uint32_t>>& offered,
                   std::optional<std::string>& pinned, std::set<uint32_t>& forced) {
  for (const std::string& id : available)
    if (auto m = parse_memory_id(id); m && gpus.by_uuid(m->gpu_uuid)) offered[m->gpu_uuid].insert(m->unit);
  for (const std::string& id : must_include) {
    const auto m = parse_memory_id(id);
    if (!m || !gpus.by_uuid(m->gpu_uuid) || (pinned && *pinned != m->gpu_uuid)) return false;
    pinned = m->gpu_uuid;
    forced.insert(m->unit);
  }
  if (pinned) offered[*pinned].insert(forced.begin(), forced.end());
  return true;
}

}  // namespace

std::vector<std::string> preferred_memory(const GpuTable& gpus, const AllocationBook& book,
                                          const std::vector<std::string>& available,
                                          const std::vector<std::string>& must_include, size_t size,
                                          std::optional<uint32_t> compute, PlacementPolicy policy) {
  std::map<std::string, std::set<uint32_t>> offered;
  std::optional<std::string> pinned;
  std::set<uint32_t> forced;
  if (!offered_units(gpus, available, must_include, offered, pinned, forced) || forced.size() > size) return {};
  std::vector<GpuRoom> rooms;
  std::vector<std::string> uuids;
  for (const auto& [uuid, units] : offered) {
    if (pinned && uuid != *pinned) continue;
    const Gpu& g = *gpus.by_uuid(uuid);
    const uint32_t capacity = gpus.capacity_units(g);
    uint32_t unused = capacity;
    for (uint32_t u : book.used_units(g.index)) unused -= u < capacity ? 1 : 0;
    rooms.push_back({g.index, capacity, static_cast<uint32_t>(units.size()), unused, compute_on(book, g.index)});
    uuids.push_back(uuid);
  }
  const std::optional<size_t> chosen =
      choose_gpu(rooms, {static_cast<uint32_t>(std::min<size_t>(size, UINT32_MAX)), compute}, policy);
  if (!chosen) return {};
  const std::string& uuid = uuids[*chosen];
  std::vector<std::string> out;
  for (uint32_t u : forced) out.push_back(memory_id(uuid, u));
  for (uint32_t u : offered.at(uuid)) {
    if (out.size() == size) break;
    if (!forced.count(u)) out.push_back(memory_id(uuid, u));
  }
  return out;
}

std::vector<std::string> preferred_compute(const std::vector<std::string>& available,
                                           const std::vector<std::string>& must_include, size_t size) {
  std::set<uint32_t> forced, free;
  for (const std::string& id : must_include)
    if (auto n = parse_compute_id(id)) forced.insert(*n);
  for (const std::string& id : available)
    if (auto n = parse_compute_id(id)) free.insert(*n);
  std::vector<std::string> out;
  for (uint32_t n : forced) out.push_back(compute_id(n));
  for (uint32_t n : free) {
    if (out.size() >= size) break;
    if (!forced.count(n)) out.push_back(compute_id(n));
  }
  return out;
}

}  // namespace cuslice::device_plugin
