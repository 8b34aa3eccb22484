// The allocations' record (allocation_book.h).
#include "device_plugin/allocation_book.h"

#include "device_plugin/device_ids.h"

namespace cuslice::device_plugin {

uint64_t Allocation::memory_bytes() const { return units.size() * kMemoryUnit; }

std::set<uint32_t> AllocationBook::used_units(uint32_t gpu) const {
  std::set<uint32_t> used;
  for (const auto& [name, a] : allocations_)
    if (a.gpu == gpu) used.insert(a.units.begin(), a.units.end());
  return used;
}

const Allocation* AllocationBook::find_same(uint32_t gpu, const std::set<uint32_t>& units) const {
  for (const auto& [name, a] : allocations_)
    if (!a.tenant.empty() && a.gpu == gpu && a.units == units) return &a;
  return nullptr;
}

Allocation* AllocationBook::find(const std::string& name) {
  const auto it = allocations_.find(name);
  return it == allocations_.end() ? nullptr : &it->second;
}

const Allocation* AllocationBook::add(Allocation allocation) {
  const std::string name = allocation.tenant;
  auto [it, inserted] = allocations_.emplace(name, std::move(allocation));
  return inserted ? &it->second : nullptr;
}

void AllocationBook::restore(Allocation allocation) {
  const std::string name = allocation.tenant;
  allocations_[name] = std::move(allocation);
}

void AllocationBook::adopt(Allocation allocation) {
  allocations_.emplace("~adopted-" + std::to_string(++adopted_), std::move(allocation));
}

void AllocationBook::forget(const std::string& name) { allocations_.erase(name); }

Allocation AllocationBook::take(const std::string& name) {
  const auto it = allocations_.find(name);
  Allocation allocation = std::move(it->second);
  allocations_.erase(it);
  return allocation;
}

}  // namespace cuslice::device_plugin
