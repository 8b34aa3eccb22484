// The choice of a GPU (placement.h).
#include "device_plugin/placement.h"

#include <algorithm>
#include <limits>

namespace cuslice::device_plugin {
namespace {

// Rule 3's measure: the fraction of memory and of compute left free once the container is
// there, added.
double left_free(const GpuRoom& room, const PlacementRequest& request, uint32_t compute) {
  const uint32_t unused = std::max(room.unused_units, room.free_units);
  const double memory =
      room.capacity_units == 0 ? 0.0 : double(unused - request.units) / double(room.capacity_units);
  const uint32_t free = room.compute.free();
  return memory + double(free - std::min(free, compute)) / double(kWholeGpuPercent);
}

// Rule 3 among the positions in `candidates`.
std::optional<size_t> by_policy(const std::vector<GpuRoom>& rooms, const std::vector<size_t>& candidates,
                                const PlacementRequest& request, uint32_t compute, PlacementPolicy policy) {
  std::optional<size_t> best;
  double best_left = 0.0;
  for (size_t i : candidates) {
    const double left = left_free(rooms[i], request, compute);
    const bool better = policy == PlacementPolicy::kBinpack ? left < best_left : left > best_left;
    if (!best || better || (left == best_left && rooms[i].index < rooms[*best].index)) {
      best = i;
      best_left = left;
    }
  }
  return best;
}

// The positions whose memory fits and whose free compute is at least `compute`.
std::vector<size_t> fitting(const std::vector<GpuRoom>& rooms, uint32_t units, uint32_t compute) {
  std::vector<size_t> out;
  for (size_t i = 0; i < rooms.size(); ++i)
    if (rooms[i].free_units >= units && rooms[i].compute.free() >= compute) out.push_back(i);
  return out;
}

// Rule 2: only the candidates with the least compute promised.
std::vector<size_t> least_promised(const std::vector<GpuRoom>& rooms, const std::vector<size_t>& candidates) {
  uint32_t least = std::numeric_limits<uint32_t>::max();
  for (size_t i : candidates) least = std::min(least, rooms[i].compute.promised);
  std::vector<size_t> out;
  for (size_t i : candidates)
    if (rooms[i].compute.promised == least) out.push_back(i);
  return out;
}

}  // namespace

std::optional<PlacementPolicy> parse_placement(std::string_view text) {
  if (text == "binpack") return PlacementPolicy::kBinpack;
  if (text == "spread") return PlacementPolicy::kSpread;
  return std::nullopt;
}

const char* placement_name(PlacementPolicy policy) {
  return policy == PlacementPolicy::kBinpack ? "binpack" : "spread";
}

std::optional<size_t> choose_gpu(const std::vector<GpuRoom>& rooms, const PlacementRequest& request,
                                 PlacementPolicy policy) {
  if (request.compute) {  // rules 1 and 3
    const std::vector<size_t> both = fitting(rooms, request.units, std::max(*request.compute, kMemoryOnlyPercent));
    if (!both.empty()) return by_policy(rooms, both, request, *request.compute, policy);
  }
  // Rules 2 and 4: compute not known, or known and fitting nowhere.
  const std::vector<size_t> some = fitting(rooms, request.units, kMemoryOnlyPercent);
  if (!some.empty()) return by_policy(rooms, least_promised(rooms, some), request, kMemoryOnlyPercent, policy);
  return by_policy(rooms, fitting(rooms, request.units, 0), request, 0, policy);  // rule 5
}

}  // namespace cuslice::device_plugin
