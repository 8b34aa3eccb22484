// The check at a container's start (container_start.h).
#include "device_plugin/container_start.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <utility>

#include "device_plugin/compute_room.h"
#include "device_plugin/device_ids.h"

namespace cuslice::device_plugin {
namespace {

// The tenant made for exactly `holder`'s memory IDs; null when none.
Allocation* tenant_of(AllocationBook& book, const Holding& holder) {
  std::set<std::pair<std::string, uint32_t>> held;
  for (const std::string& id : holder.memory_ids)
    if (auto m = parse_memory_id(id)) held.insert({m->gpu_uuid, m->unit});
  Allocation* found = nullptr;
  book.update_each([&](const std::string&, Allocation& a) {
    std::set<std::pair<std::string, uint32_t>> units;
    for (uint32_t u : a.units) units.insert({a.gpu_uuid, u});
    if (!a.tenant.empty() && units == held) found = &a;
  });
  return found;
}

}  // namespace

const Holding* holder_of(const std::vector<Holding>& holdings, const std::vector<std::string>& compute_ids) {
  const std::set<std::string> wanted(compute_ids.begin(), compute_ids.end());
  for (const Holding& h : holdings)
    if (std::set<std::string>(h.compute_ids.begin(), h.compute_ids.end()) == wanted) return &h;
  return nullptr;
}

StartOutcome check_start(AllocationBook& book, const std::vector<std::string>& compute_ids,
                         const std::vector<Holding>& holdings) {
  StartOutcome out;
  const Holding* holder = holder_of(holdings, compute_ids);
  if (!holder) return out;
  if (holder->memory_ids.empty()) {  // rule 1
    out.error = fmt::format("{}: container {} asks for {}% of a GPU but for no {}: compute is a share of the GPU "
                            "the container's memory is on, so it would get no GPU; ask for {} too",
                            kComputeResource, holder->workload.text(), compute_ids.size(), kMemoryResource,
                            kMemoryResource);
    return out;
  }
  Allocation* a = tenant_of(book, *holder);
  if (!a) return out;
  out.tenant = a->tenant;
  const uint32_t free = compute_on(book, a->gpu, a->tenant).free();
  a->compute_refused = a->compute_percent > free;  // rule 2
  if (a->compute_refused)
    out.error = fmt::format("{}: container {} asks for {}% of GPU {} ({}), where its memory is, but only {}% of that "
                            "GPU's compute is free; it starts once enough is (or ask for {}% or less)",
                            kComputeResource, holder->workload.text(), a->compute_percent, a->gpu, a->gpu_uuid, free,
                            free);
  return out;
}

}  // namespace cuslice::device_plugin
