#include "ledger.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "device_ids.h"
#include "ppm.h"

namespace cuslice::device_plugin {
namespace {

std::string join(const std::vector<std::string>& parts, const char* separator) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : separator) + p;
  return out;
}

}  // namespace

std::string gib_text(uint64_t bytes) {
  return fmt::format("{:g} GiB", static_cast<double>(bytes) / static_cast<double>(kMemoryUnit));
}

uint64_t Allocation::memory_bytes() const { return units.size() * kMemoryUnit; }

void Ledger::set_gpus(const std::vector<Gpu>& gpus) {
  for (Gpu& known : gpus_) known.present = false;
  for (const Gpu& g : gpus) {
    auto it = std::find_if(gpus_.begin(), gpus_.end(), [&](const Gpu& k) { return k.uuid == g.uuid; });
    if (it == gpus_.end()) {
      gpus_.push_back(g);
      gpus_.back().present = true;
      continue;
    }
    const uint64_t held_back = it->held_back;
    *it = g;
    it->held_back = held_back;
    it->present = true;
  }
  std::sort(gpus_.begin(), gpus_.end(), [](const Gpu& a, const Gpu& b) { return a.index < b.index; });
}

void Ledger::set_held_back(uint32_t gpu, uint64_t bytes) {
  for (Gpu& g : gpus_)
    if (g.index == gpu) g.held_back = bytes;
}

const Gpu* Ledger::gpu_by_uuid(const std::string& uuid) const {
  for (const Gpu& g : gpus_)
    if (g.uuid == uuid) return &g;
  return nullptr;
}

const Gpu* Ledger::gpu_by_index(uint32_t index) const {
  for (const Gpu& g : gpus_)
    if (g.index == index) return &g;
  return nullptr;
}

uint32_t Ledger::capacity_units(const Gpu& gpu) const {
  const uint64_t usable = gpu.memory_total > gpu.held_back ? gpu.memory_total - gpu.held_back : 0;
  return static_cast<uint32_t>(std::min<uint64_t>(usable / kMemoryUnit, options_.max_units));
}

std::set<uint32_t> Ledger::used_units(uint32_t gpu) const {
  std::set<uint32_t> used;
  for (const auto& [name, a] : allocations_)
    if (a.gpu == gpu) used.insert(a.units.begin(), a.units.end());
  return used;
}

std::vector<Device> Ledger::memory_devices() const {
  std::vector<Device> out;
  for (const Gpu& g : gpus_) {
    const uint32_t capacity = capacity_units(g);
    const std::set<uint32_t> used = used_units(g.index);
    uint32_t listed = capacity;
    if (!used.empty()) listed = std::max(listed, *used.rbegin() + 1);
    const bool usable = g.present && scheduler_reachable_;
    for (uint32_t u = 0; u < listed; ++u)
      out.push_back({memory_id(g.uuid, u), usable && (u < capacity || used.count(u) > 0)});
  }
  return out;
}

std::vector<Device> Ledger::compute_devices() const {
  std::vector<Device> out;
  uint32_t n = 0;
  for (const Gpu& g : gpus_)
    for (uint32_t i = 0; i < kComputePerGpu; ++i) out.push_back({compute_id(n++), g.present && scheduler_reachable_});
  return out;
}

std::vector<std::string> Ledger::preferred_memory(const std::vector<std::string>& available,
                                                  const std::vector<std::string>& must_include, size_t size) const {
  // Candidate units per GPU, must_include apart (they come first, and pin the GPU).
  std::map<std::string, std::set<uint32_t>> free_by_gpu;
  for (const std::string& id : available)
    if (auto m = parse_memory_id(id); m && gpu_by_uuid(m->gpu_uuid)) free_by_gpu[m->gpu_uuid].insert(m->unit);
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
        (room.size() == best_room && gpu_by_uuid(uuid)->index < gpu_by_uuid(*best)->index)) {
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

std::vector<std::string> Ledger::preferred_compute(const std::vector<std::string>& available,
                                                   const std::vector<std::string>& must_include, size_t size) const {
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

std::string Ledger::memory_refusal(const std::vector<std::string>& ids, const std::string& why) const {
  std::vector<std::string> free;
  for (const Gpu& g : gpus_) {
    const uint32_t capacity = capacity_units(g);
    uint32_t used = 0;
    for (uint32_t u : used_units(g.index)) used += u < capacity ? 1 : 0;
    free.push_back(fmt::format("GPU {} ({}): {} free of {}{}", g.index, g.uuid,
                               gib_text(uint64_t{capacity - used} * kMemoryUnit), gib_text(g.memory_total),
                               g.present ? "" : ", gone"));
  }
  return fmt::format("{}: {} asked for, {}; free memory per GPU: {}", kMemoryResource,
                     gib_text(ids.size() * kMemoryUnit), why, free.empty() ? "no GPU found" : join(free, "; "));
}

Ledger::MemoryOutcome Ledger::allocate_memory(const std::vector<std::string>& ids, Clock::time_point now,
                                              const std::string& fresh_tenant, const std::string& fresh_key) {
  MemoryOutcome out;
  if (ids.empty()) {
    out.error = fmt::format("{}: an Allocate call with no device ID", kMemoryResource);
    return out;
  }
  std::set<std::string> uuids;
  std::set<uint32_t> units;
  for (const std::string& id : ids) {
    const auto m = parse_memory_id(id);
    if (!m || !gpu_by_uuid(m->gpu_uuid)) {
      out.error = fmt::format("{}: `{}` is not a device ID this plugin advertises", kMemoryResource, id);
      return out;
    }
    uuids.insert(m->gpu_uuid);
    units.insert(m->unit);
  }
  if (uuids.size() > 1) {
    out.error = memory_refusal(ids, "but a container's memory must be on one GPU and no GPU of this node has that "
                                    "much free (the kubelet chose IDs on " +
                                        std::to_string(uuids.size()) + " GPUs)");
    return out;
  }
  const Gpu& gpu = *gpu_by_uuid(*uuids.begin());
  if (!gpu.present) {
    out.error = memory_refusal(ids, fmt::format("on GPU {}, which NVML no longer reports", gpu.index));
    return out;
  }
  if (units.size() != ids.size()) {
    out.error = fmt::format("{}: the same device ID twice in one Allocate call", kMemoryResource);
    return out;
  }
  // The kubelet asks again with the same IDs when it lost its record of the answer (a
  // restart while the pod was being admitted): the same tenant, the same answer.
  for (const auto& [name, a] : allocations_) {
    if (!a.tenant.empty() && a.gpu == gpu.index && a.units == units) {
      out.allocation = &a;
      return out;
    }
  }
  Allocation a;
  a.tenant = fresh_tenant;
  a.key = fresh_key;
  a.gpu = gpu.index;
  a.gpu_uuid = gpu.uuid;
  a.units = std::move(units);
  a.created = now;
  auto [it, inserted] = allocations_.emplace(a.tenant, std::move(a));
  if (!inserted) {
    out.error = fmt::format("{}: tenant name {} is taken", kMemoryResource, fresh_tenant);
    return out;
  }
  out.allocation = &it->second;
  out.created = true;
  return out;
}

std::string Ledger::check_compute(const std::vector<std::string>& ids) const {
  const uint32_t known = static_cast<uint32_t>(gpus_.size()) * kComputePerGpu;
  for (const std::string& id : ids) {
    const auto n = parse_compute_id(id);
    if (!n || *n >= known) return fmt::format("{}: `{}` is not a device ID this plugin advertises", kComputeResource, id);
  }
  if (ids.empty()) return fmt::format("{}: an Allocate call with no device ID", kComputeResource);
  return {};
}

void Ledger::forget(const std::string& tenant) { allocations_.erase(tenant); }

void Ledger::restore(Allocation allocation) {
  const std::string name = allocation.tenant;
  allocations_[name] = std::move(allocation);
}

Ledger::ReconcileResult Ledger::reconcile(const std::vector<Holding>& holdings, Clock::time_point now,
                                          bool may_remove) {
  ReconcileResult result;
  // Who holds each memory unit, by GPU UUID and unit.
  std::map<std::pair<std::string, uint32_t>, std::vector<size_t>> holders_of;
  for (size_t h = 0; h < holdings.size(); ++h)
    for (const std::string& id : holdings[h].memory_ids)
      if (auto m = parse_memory_id(id)) holders_of[{m->gpu_uuid, m->unit}].push_back(h);

  std::vector<bool> covered(holdings.size(), false);
  for (auto it = allocations_.begin(); it != allocations_.end();) {
    Allocation& a = it->second;
    std::vector<size_t> holders;
    for (uint32_t u : a.units)
      if (auto found = holders_of.find({a.gpu_uuid, u}); found != holders_of.end())
        holders.insert(holders.end(), found->second.begin(), found->second.end());
    if (holders.empty()) {
      if (a.seen && !a.absent_since) a.absent_since = now;
      const bool gone = a.seen ? now - *a.absent_since >= options_.removal_delay
                               : now - a.created >= options_.unseen_grace;
      if (gone && may_remove) {
        result.removed.push_back(std::move(a));
        it = allocations_.erase(it);
      } else {
        ++it;
      }
      continue;
    }
    a.absent_since.reset();
    // Several holders: an init container and the app container after it reuse IDs. The
    // one holding exactly these IDs is the one this tenant was made for.
    size_t chosen = holders.front();
    for (size_t h : holders) {
      std::set<uint32_t> held;
      for (const std::string& id : holdings[h].memory_ids)
        if (auto m = parse_memory_id(id); m && m->gpu_uuid == a.gpu_uuid) held.insert(m->unit);
      if (held == a.units) chosen = h;
      covered[h] = true;
    }
    a.seen = true;
    a.workload = holdings[chosen].workload;
    uint32_t compute = 0;
    for (const std::string& id : holdings[chosen].compute_ids) compute += parse_compute_id(id) ? 1 : 0;
    a.compute_percent = std::min(compute, uint32_t{100});
    ++it;
  }

  std::set<std::string> still;  // conditions that hold now, so that a cleared one may warn again
  for (size_t h = 0; h < holdings.size(); ++h) {
    const Holding& hold = holdings[h];
    if (hold.memory_ids.empty() && !hold.compute_ids.empty()) {
      const std::string key = "compute-only " + hold.workload.text();
      still.insert(key);
      if (warned_.insert(key).second)
        result.warnings.push_back(fmt::format(
            "container {} holds {} {} but no {}: it gets no GPU (ask for memory too; compute is a share of the "
            "GPU the memory is on)",
            hold.workload.text(), hold.compute_ids.size(), kComputeResource, kMemoryResource));
    }
    if (covered[h] || hold.memory_ids.empty()) continue;
    // Memory IDs no allocation of ours covers: the plugin lost track of them (its record in
    // the scheduler was lost with a scheduler restart it did not see). They stay counted as
    // used, with no tenant, until the container goes.
    std::map<std::string, std::set<uint32_t>> by_gpu;
    for (const std::string& id : hold.memory_ids)
      if (auto m = parse_memory_id(id); m && gpu_by_uuid(m->gpu_uuid)) by_gpu[m->gpu_uuid].insert(m->unit);
    for (auto& [uuid, units] : by_gpu) {
      Allocation a;
      a.tenant.clear();
      a.gpu = gpu_by_uuid(uuid)->index;
      a.gpu_uuid = uuid;
      a.units = std::move(units);
      a.workload = hold.workload;
      a.seen = true;
      a.created = now;
      result.warnings.push_back(fmt::format("container {} holds {} of GPU {} that no tenant of this plugin covers: "
                                            "counted as used, not scheduled; restart the pod to give it a tenant",
                                            hold.workload.text(), gib_text(a.memory_bytes()), a.gpu));
      allocations_.emplace("~adopted-" + std::to_string(++adopted_), std::move(a));
    }
  }
  for (auto it = warned_.begin(); it != warned_.end();) it = still.count(*it) ? std::next(it) : warned_.erase(it);
  return result;
}

uint32_t Ledger::share_ppm(const Allocation& allocation) const {
  if (allocation.compute_percent > 0) return std::min(allocation.compute_percent * kPpmPerPercent, kPpmWhole);
  uint32_t explicit_ppm = 0, without = 0;
  for (const auto& [name, a] : allocations_) {
    if (a.tenant.empty() || a.gpu != allocation.gpu) continue;
    if (a.compute_percent > 0) explicit_ppm += a.compute_percent * kPpmPerPercent;
    else ++without;
  }
  const uint32_t left = explicit_ppm < kPpmWhole ? kPpmWhole - explicit_ppm : 0;
  return std::max(left / std::max(without, uint32_t{1}), kPpmPerPercent);
}

uint32_t Ledger::limit_ppm(const Allocation& allocation) const {
  return options_.cap_compute && allocation.compute_percent > 0 ? share_ppm(allocation) : kPpmWhole;
}

}  // namespace cuslice::device_plugin
