// GetPreferredAllocation's choices (preferred_allocation.h).
#include "preferred_allocation.h"

#include <map>
#include <optional>
#include <set>

#include "device_ids.h"

namespace cuslice::device_plugin {

std::vector<std::string> preferred_memory(const GpuTable& gpus, const std::vector<std::string>& available,
                                          const std::vector<std::string>& must_include, size_t size) {
  // Candidate units per GPU, must_include apart (they come first, and pin the GPU).
  std::map<std::string, std::set<uint32_t>> free_by_gpu;
  for (const std::string& id : available)
    if (auto m = parse_memory_id(id); m && gpus.by_uuid(m->gpu_uuid)) free_by_gpu[m->gpu_uuid].insert(m->unit);
  std::optional<std::string> pinned;
  std::set<uint32_t> forced;
  for (const std::string& id : must_include) {
    const auto m = parse_memory_id(id);
    if (!m || (pinned && *pinned != m->gpu_uuid)) return {};  // cannot be on one GPU
    pinned = m->gpu_uuid;
    forced.insert(m->unit);
  }
  if (forced.size() > size) return {};
  const std::string* best = nullptr;
  size_t best_room = 0;
  for (const auto& [uuid, units] : free_by_gpu) {
    if (pinned && uuid != *pinned) continue;
    std::set<uint32_t> room = units;
    room.insert(forced.begin(), forced.end());
    if (room.size() < size) continue;
    // Best fit; ties go to the lower index (map order is by UUID, so compare indices).
    if (!best || room.size() < best_room ||
        (room.size() == best_room && gpus.by_uuid(uuid)->index < gpus.by_uuid(*best)->index)) {
      best = &uuid;
      best_room = room.size();
    }
  }
  if (!best) return {};
  std::vector<std::string> out;
  for (uint32_t u : forced) out.push_back(memory_id(*best, u));
  for (uint32_t u : free_by_gpu.at(*best)) {
    if (out.size() == size) break;
    if (!forced.count(u)) out.push_back(memory_id(*best, u));
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
