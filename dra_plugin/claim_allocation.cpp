#include "dra_plugin/claim_allocation.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "dra_plugin/quantity.h"

namespace cuslice::dra {
namespace {

using nlohmann::json;

std::string string_at(const json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A consumed amount: absent, or a quantity; false with `why` when it is neither.
bool consumed(const json& capacities, const char* name, std::optional<uint64_t>& out, std::string& why) {
  const auto it = capacities.find(name);
  if (it == capacities.end()) return true;
  if (it->is_string()) out = parse_quantity(it->get<std::string>());
  if (!out) why = fmt::format("consumedCapacity {} is not a quantity: {}", name, it->dump());
  return out.has_value();
}

// `object[key]` when `object` is an object whose `key` is of `type`, else null.
const json* member(const json& object, const char* key, json::value_t type) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it != object.end() && it->type() == type ? &*it : nullptr;
}

// status.allocation.devices.results, when the claim is allocated.
const json* allocation_results(const json& claim) {
  const json* at = &claim;
  for (const char* key : {"status", "allocation", "devices"})
    if (at = member(*at, key, json::value_t::object); at == nullptr) return nullptr;
  return member(*at, "results", json::value_t::array);
}

// Whether `claim` is a ResourceClaim, the one of `uid`; false with `why`.
bool is_the_claim(const json& claim, const std::string& uid, std::string& why) {
  const json* metadata = member(claim, "metadata", json::value_t::object);
  if (metadata == nullptr) {
    why = "the API server's answer is not a ResourceClaim";
    return false;
  }
  if (string_at(*metadata, "uid") != uid) {
    why = fmt::format("the ResourceClaim of that name has UID {}, not {}: it was deleted and made again",
                      string_at(*metadata, "uid"), uid);
    return false;
  }
  return true;
}

// One result of this driver and pool as a device; nullopt with `why` when it is malformed.
std::optional<AllocatedDevice> allocated_device(const json& r, const std::string& pool, std::string& why) {
  AllocatedDevice d{string_at(r, "request"), pool, string_at(r, "device"), std::nullopt, std::nullopt, std::nullopt};
  if (auto id = r.find("shareID"); id != r.end() && id->is_string()) d.share_id = id->get<std::string>();
  const auto c = r.find("consumedCapacity");
  if (c == r.end()) return d;
  if (!c->is_object()) {
    why = "consumedCapacity is not an object";
    return std::nullopt;
  }
  if (!consumed(*c, kMemoryCapacity, d.memory, why) || !consumed(*c, kComputeCapacity, d.compute, why))
    return std::nullopt;
  return d;
}

// The first pod with a name that the claim is reserved for (status.reservedFor), or "".
std::string reserved_pod(const json& claim) {
  const json* status = member(claim, "status", json::value_t::object);
  const json* reserved = status ? member(*status, "reservedFor", json::value_t::array) : nullptr;
  if (reserved == nullptr) return "";
  for (const json& c : *reserved) {
    if (!c.is_object() || string_at(c, "resource") != "pods") continue;
    if (std::string name = string_at(c, "name"); !name.empty()) return name;
  }
  return "";
}

}  // namespace

std::optional<ClaimAllocation> allocation_of(const json& claim, const std::string& uid, const std::string& pool,
                                             std::string& why) {
  if (!is_the_claim(claim, uid, why)) return std::nullopt;
  const json* results = allocation_results(claim);
  if (!results) {
    why = "the ResourceClaim is not allocated";
    return std::nullopt;
  }
  ClaimAllocation out;
  for (const json& r : *results) {
    if (!r.is_object() || string_at(r, "driver") != kDriverName || string_at(r, "pool") != pool) continue;
    std::optional<AllocatedDevice> d = allocated_device(r, pool, why);
    if (!d) return std::nullopt;
    out.devices.push_back(std::move(*d));
  }
  out.pod = reserved_pod(claim);
  return out;
}

std::optional<TenantPlan> plan_tenant(const std::vector<AllocatedDevice>& devices,
                                      const std::vector<node::GpuInfo>& gpus, const SliceOptions& options,
                                      std::string& why) {
  if (devices.empty()) {
    why = fmt::format("the claim has no device of {} on this node", kDriverName);
    return std::nullopt;
  }
  TenantPlan plan;
  std::set<uint32_t> seen;
  for (size_t k = 0; k < devices.size(); ++k) {
    const AllocatedDevice& d = devices[k];
    const std::optional<uint32_t> index = device_index(d.device);
    const auto gpu = std::find_if(gpus.begin(), gpus.end(), [&](const node::GpuInfo& g) { return index == g.index; });
    if (!index || gpu == gpus.end()) {
      why = fmt::format("device {} is not a GPU of this node (it may have gone)", d.device);
      return std::nullopt;
    }
    if (!seen.insert(*index).second) {  // rule 2
      why = fmt::format("the claim holds device {} twice; a claim may hold one share of a GPU", d.device);
      return std::nullopt;
    }
    // Rule 1.
    const uint64_t memory = d.memory.value_or(memory_capacity(gpu->memory_total, options));
    const uint64_t compute = d.compute.value_or(100);
    if (memory == 0 || compute == 0 || compute > 100) {  // rule 4
      why = fmt::format("device {}: {} bytes of memory and {}% compute cannot be a share of a GPU", d.device, memory,
                        compute);
      return std::nullopt;
    }
    if (k > 0 && (memory != plan.memory_bytes || compute != plan.compute_percent)) {  // rule 3
      why = fmt::format("the claim consumed different amounts on its GPUs ({} bytes and {}% on {}, {} bytes and {}% "
                        "on {}); cuslice enforces one quota and one share on all of a claim's GPUs: request the "
                        "same amounts for each",
                        plan.memory_bytes, plan.compute_percent, devices[0].device, memory, compute, d.device);
      return std::nullopt;
    }
    plan.memory_bytes = memory;
    plan.compute_percent = static_cast<uint32_t>(compute);
    plan.gpus.push_back(*index);
  }
  std::sort(plan.gpus.begin(), plan.gpus.end());
  return plan;
}

}  // namespace cuslice::dra
