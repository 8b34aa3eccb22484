// What the ledger's unit tests share: GPUs with made-up UUIDs, a ledger that knows them and
// a scheduler that answers, and short ways to write device IDs and PodResources holdings.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "device_ids.h"
#include "ledger.h"

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

}  // namespace cuslice::device_plugin
