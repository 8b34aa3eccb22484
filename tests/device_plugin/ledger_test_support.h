// What the ledger's unit tests share: GPUs with made-up UUIDs, a ledger that knows them and
// a scheduler that answers, short ways to write device IDs and PodResources holdings, and the
// kubelet's side of admitting a container (TestKubelet).
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "device_plugin/device_ids.h"
#include "device_plugin/ledger.h"

namespace cuslice::device_plugin {

inline constexpr uint64_t GiB = uint64_t{1} << 30;

inline std::string uuid(int i) { return "GPU-0000000" + std::to_string(i) + "-0000-0000-0000-000000000000"; }

inline Ledger ledger_with(int gpus, uint64_t memory = 16 * GiB, LedgerOptions options = {}) {
  Ledger l(options);
  std::vector<Gpu> list;
  for (int i = 0; i < gpus; ++i) list.push_back({static_cast<uint32_t>(i), uuid(i), memory, 0, true});
  l.set_gpus(list);
  l.set_scheduler_reachable(true);
  return l;
}

inline std::vector<std::string> ids(int gpu, std::initializer_list<uint32_t> units) {
  std::vector<std::string> out;
  for (uint32_t u : units) out.push_back(memory_id(uuid(gpu), u));
  return out;
}

inline std::vector<std::string> all_ids(const std::vector<Device>& devices) {
  std::vector<std::string> out;
  for (const Device& d : devices) out.push_back(d.id);
  return out;
}

inline size_t healthy(const std::vector<Device>& devices) {
  size_t n = 0;
  for (const Device& d : devices) n += d.healthy;
  return n;
}

inline Holding holding(const char* pod, const char* container, std::vector<std::string> memory, size_t compute = 0,
                       uint32_t compute_from = 0) {
  Holding h{{"ns", pod, container}, std::move(memory), {}};
  for (size_t i = 0; i < compute; ++i) h.compute_ids.push_back(compute_id(compute_from + i));
  return h;
}

inline std::vector<std::string> compute_ids(size_t count, uint32_t from = 0) {
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) out.push_back(compute_id(from + static_cast<uint32_t>(i)));
  return out;
}

// The GPU each memory ID of `chosen` is on (by index into uuid()).
inline std::set<std::string> gpus_of(const std::vector<std::string>& chosen) {
  std::set<std::string> out;
  for (const std::string& id : chosen) out.insert(parse_memory_id(id)->gpu_uuid);
  return out;
}

// The kubelet's side of admitting a container, as the kubelet does it: for each resource in
// turn, the healthy IDs no container holds, GetPreferredAllocation, then Allocate with what
// it preferred. The containers admitted are what PodResources would list; as the plugin does
// (device_plugin.cpp), a memory call after a compute call first settles the pairing with them,
// the container being admitted included.
struct TestKubelet {
  explicit TestKubelet(Ledger& l) : ledger(l) {}

  Ledger& ledger;
  std::set<std::string> held;
  std::vector<Holding> containers;  // pod = the tenant's name, container "c"

  // The GPU the container's memory went to; -1 when refused (`error` says why) or when it
  // asked for no memory.
  int admit(const std::string& tenant, uint32_t memory, uint32_t compute, bool compute_first, Clock::time_point now,
            std::string* error = nullptr) {
    Holding container{{"ns", tenant, "c"}, {}, {}};
    int gpu = -1;
    std::string why;
    const auto free_ids = [&](const std::vector<Device>& devices) {
      std::vector<std::string> out;
      for (const Device& d : devices)
        if (d.healthy && !held.count(d.id)) out.push_back(d.id);
      return out;
    };
    const auto memory_call = [&] {
      if (ledger.pairing_needs_pods(now)) {
        std::vector<Holding> listed = containers;
        listed.push_back(container);
        ledger.settle_pairing(listed, now + std::chrono::nanoseconds(1));  // asked for after the compute call
      }
      container.memory_ids = ledger.preferred_memory(free_ids(ledger.memory_devices()), {}, memory, now);
      if (container.memory_ids.size() != memory) {
        why = "no GPU preferred";
        return false;
      }
      const auto outcome = ledger.allocate_memory(container.memory_ids, now, tenant, "key-" + tenant);
      why = outcome.error;
      if (outcome.allocation) gpu = static_cast<int>(outcome.allocation->gpu);
      return outcome.allocation != nullptr;
    };
    const auto compute_call = [&] {
      container.compute_ids = ledger.preferred_compute(free_ids(ledger.compute_devices()), {}, compute);
      why = ledger.allocate_compute(container.compute_ids, now);
      return why.empty();
    };
    bool ok = true;
    if (compute_first && compute > 0) ok = compute_call();
    if (ok && memory > 0) ok = memory_call();
    if (ok && !compute_first && compute > 0) ok = compute_call();
    if (error) *error = why;
    if (!ok) return -1;
    held.insert(container.memory_ids.begin(), container.memory_ids.end());
    held.insert(container.compute_ids.begin(), container.compute_ids.end());
    containers.push_back(std::move(container));
    return gpu;
  }
};

}  // namespace cuslice::device_plugin
