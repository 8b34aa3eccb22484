// Allocate calls' IDs (allocate_request.h).
#include "device_plugin/allocate_request.h"

#include <fmt/format.h>

#include <optional>

#include "device_plugin/compute_room.h"
#include "device_plugin/device_ids.h"

namespace cuslice::device_plugin {
namespace {

std::string join(const std::vector<std::string>& parts, const char* separator) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : separator) + p;
  return out;
}

// A refusal of `ids` for `why`, with each GPU's free memory: what the pod's owner needs to
// ask for an amount that fits.
std::string memory_refusal(const GpuTable& gpus, const AllocationBook& book, const std::vector<std::string>& ids,
                           const std::string& why) {
  std::vector<std::string> free;
  for (const Gpu& g : gpus.all()) {
    const uint32_t capacity = gpus.capacity_units(g);
    uint32_t used = 0;
    for (uint32_t u : book.used_units(g.index)) used += u < capacity ? 1 : 0;
    free.push_back(fmt::format("GPU {} ({}): {} free of {}{}", g.index, g.uuid,
                               gib_text(uint64_t{capacity - used} * kMemoryUnit), gib_text(g.memory_total),
                               g.present ? "" : ", gone"));
  }
  return fmt::format("{}: {} asked for, {}; free memory per GPU: {}", kMemoryResource,
                     gib_text(ids.size() * kMemoryUnit), why, free.empty() ? "no GPU found" : join(free, "; "));
}

// The GPU and units that `ids` name; no GPU, and `error`, when they cannot be one
// container's memory.
struct MemoryRequest {
  const Gpu* gpu = nullptr;
  std::set<uint32_t> units;
  std::string error;
};

MemoryRequest read_memory_request(const GpuTable& gpus, const AllocationBook& book,
                                  const std::vector<std::string>& ids) {
  MemoryRequest request;
  if (ids.empty()) {
    request.error = fmt::format("{}: an Allocate call with no device ID", kMemoryResource);
    return request;
  }
  std::set<std::string> uuids;
  for (const std::string& id : ids) {
    const auto m = parse_memory_id(id);
    if (!m || !gpus.by_uuid(m->gpu_uuid)) {
      request.error = fmt::format("{}: `{}` is not a device ID this plugin advertises", kMemoryResource, id);
      return request;
    }
    uuids.insert(m->gpu_uuid);
    request.units.insert(m->unit);
  }
  if (uuids.size() > 1) {
    request.error = memory_refusal(gpus, book, ids,
                                   "but a container's memory must be on one GPU and no GPU of this node has that "
                                   "much free (the kubelet chose IDs on " +
                                       std::to_string(uuids.size()) + " GPUs)");
    return request;
  }
  const Gpu& gpu = *gpus.by_uuid(*uuids.begin());
  if (!gpu.present) {
    request.error = memory_refusal(gpus, book, ids, fmt::format("on GPU {}, which NVML no longer reports", gpu.index));
    return request;
  }
  if (request.units.size() != ids.size()) {
    request.error = fmt::format("{}: the same device ID twice in one Allocate call", kMemoryResource);
    return request;
  }
  request.gpu = &gpu;
  return request;
}

// Why `ids` cannot be one container's compute; "" when they can.
std::string compute_ids_error(const GpuTable& gpus, const std::vector<std::string>& ids) {
  const uint32_t known = static_cast<uint32_t>(gpus.all().size()) * kComputePerGpu;
  for (const std::string& id : ids) {
    const auto n = parse_compute_id(id);
    if (!n || *n >= known)
      return fmt::format("{}: `{}` is not a device ID this plugin advertises", kComputeResource, id);
  }
  if (ids.empty()) return fmt::format("{}: an Allocate call with no device ID", kComputeResource);
  if (ids.size() > kWholeGpuPercent)
    return fmt::format("{}: {}% asked for, but a container gets at most one GPU, {}%: ask for {} or less, and for "
                       "more than one GPU run one container per GPU",
                       kComputeResource, ids.size(), kWholeGpuPercent, kWholeGpuPercent);
  return {};
}

// Why `percent` of compute fits no GPU, naming each GPU's free compute so that the pod's
// owner can ask for an amount that fits; "" when some GPU has room. `waiting` (the memory
// call just before) counts as this container's own: its 1% would become the compute asked.
std::string compute_refusal(const GpuTable& gpus, const AllocationBook& book, size_t percent,
                            const std::optional<std::string>& waiting) {
  const auto own = waiting ? book.all().find(*waiting) : book.all().end();
  std::vector<std::string> free;
  for (const Gpu& g : gpus.all()) {
    if (!g.present) continue;
    const bool here = own != book.all().end() && own->second.gpu == g.index;
    const GpuCompute compute = compute_on(book, g.index, here ? own->first : std::string());
    if (compute.free() >= percent) return {};
    free.push_back(fmt::format("GPU {} ({}): {}%", g.index, g.uuid, compute.free()));
  }
  return fmt::format("{}: {}% asked for, but no GPU of this node has that much compute free; free compute per GPU: {}",
                     kComputeResource, percent, free.empty() ? "no GPU found" : join(free, "; "));
}

// The memory call just before, when `percent` pairs with it: it waits, has no compute yet,
// and the compute fits its GPU.
Allocation* pairs_with(AllocationBook& book, const std::optional<std::string>& waiting, uint32_t percent) {
  Allocation* a = waiting ? book.find(*waiting) : nullptr;
  if (!a || a->compute_percent != 0) return nullptr;
  return compute_on(book, a->gpu, a->tenant).free() >= percent ? a : nullptr;
}

void take_compute(Allocation& a, uint32_t percent, Clock::time_point now) {
  a.compute_percent = percent;
  a.compute_paired_at = now;
}

}  // namespace

MemoryOutcome allocate_memory(const GpuTable& gpus, AllocationBook& book, CallPairing& pairing,
                              const std::vector<std::string>& ids, Clock::time_point now,
                              const std::string& fresh_tenant, const std::string& fresh_key) {
  MemoryOutcome out;
  MemoryRequest request = read_memory_request(gpus, book, ids);
  if (!request.gpu) {
    pairing.clear();
    out.error = std::move(request.error);
    return out;
  }
  // The kubelet asks again with the same IDs when it lost its record of the answer (a
  // restart while the pod was being admitted): the same tenant, the same answer.
  if (const Allocation* same = book.find_same(request.gpu->index, request.units)) {
    out.allocation = same;
    return out;
  }
  Allocation a;
  a.tenant = fresh_tenant;
  a.key = fresh_key;
  a.gpu = request.gpu->index;
  a.gpu_uuid = request.gpu->uuid;
  a.units = std::move(request.units);
  a.created = now;
  const std::optional<uint32_t> compute = pairing.compute_waiting(now);
  const bool paired = compute && compute_on(book, a.gpu).free() >= *compute;
  if (paired) take_compute(a, *compute, now);
  out.allocation = book.add(std::move(a));
  if (!out.allocation) {
    pairing.clear();
    out.error = fmt::format("{}: tenant name {} is taken", kMemoryResource, fresh_tenant);
    return out;
  }
  pairing.memory_call(fresh_tenant, paired, now);
  out.created = true;
  return out;
}

std::string allocate_compute(const GpuTable& gpus, AllocationBook& book, CallPairing& pairing,
                             const std::vector<std::string>& ids, Clock::time_point now) {
  const std::optional<std::string> waiting = pairing.memory_waiting(now);
  std::string error = compute_ids_error(gpus, ids);
  if (error.empty()) error = compute_refusal(gpus, book, ids.size(), waiting);
  if (!error.empty()) {
    pairing.clear();
    return error;
  }
  // Not paired: the first call of the next container, or this container's compute does not
  // fit its memory's GPU (its start says so, container_start.h).
  Allocation* a = pairs_with(book, waiting, static_cast<uint32_t>(ids.size()));
  if (a) take_compute(*a, static_cast<uint32_t>(ids.size()), now);
  pairing.compute_call(ids, a != nullptr, now);
  return {};
}

}  // namespace cuslice::device_plugin
