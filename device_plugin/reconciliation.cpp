// PodResources snapshots applied to the allocations (reconciliation.h).
#include "device_plugin/reconciliation.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

#include "device_plugin/device_ids.h"

namespace cuslice::device_plugin {
namespace {

// The containers (indices into a snapshot) holding each memory unit, by GPU UUID and unit.
using HolderIndex = std::map<std::pair<std::string, uint32_t>, std::vector<size_t>>;

HolderIndex index_holders(const std::vector<Holding>& holdings) {
  HolderIndex holders_of;
  for (size_t h = 0; h < holdings.size(); ++h)
    for (const std::string& id : holdings[h].memory_ids)
      if (auto m = parse_memory_id(id)) holders_of[{m->gpu_uuid, m->unit}].push_back(h);
  return holders_of;
}

// Links `a` to the container it was made for among `holders` (those holding any of its
// units), and marks them all covered.
void link(Allocation& a, const std::vector<Holding>& holdings, const std::vector<size_t>& holders,
          Clock::time_point taken, std::vector<bool>& covered) {
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
  // A snapshot asked for before the compute call that paired with the memory one may not
  // list that compute yet (the kubelet records each call's IDs after its answer).
  if (compute == 0 && a.compute_paired_at && *a.compute_paired_at >= taken) return;
  if (compute != a.compute_percent) a.compute_refused = false;  // the start check decides again
  a.compute_percent = std::min(compute, uint32_t{100});
}

// Memory IDs no allocation of ours covers: the plugin lost track of them (its record in the
// scheduler was lost with a scheduler restart it did not see). They stay counted as used,
// with no tenant, until the container goes.
void adopt_uncovered(const GpuTable& gpus, AllocationBook& book, const Holding& hold, Clock::time_point now,
                     ReconcileResult& result) {
  std::map<std::string, std::set<uint32_t>> by_gpu;
  for (const std::string& id : hold.memory_ids)
    if (auto m = parse_memory_id(id); m && gpus.by_uuid(m->gpu_uuid)) by_gpu[m->gpu_uuid].insert(m->unit);
  for (auto& [uuid, units] : by_gpu) {
    Allocation a;
    a.tenant.clear();
    a.gpu = gpus.by_uuid(uuid)->index;
    a.gpu_uuid = uuid;
    a.units = std::move(units);
    a.workload = hold.workload;
    a.seen = true;
    a.created = now;
    result.warnings.push_back(fmt::format("container {} holds {} of GPU {} that no tenant of this plugin covers: "
                                          "counted as used, not scheduled; restart the pod to give it a tenant",
                                          hold.workload.text(), gib_text(a.memory_bytes()), a.gpu));
    book.adopt(std::move(a));
  }
}

}  // namespace

ReconcileResult Reconciler::reconcile(const GpuTable& gpus, AllocationBook& book, const std::vector<Holding>& holdings,
                                      Clock::time_point now, bool may_remove) {
  ReconcileResult result;
  std::vector<bool> covered(holdings.size(), false);
  const std::vector<std::string> gone = link_or_age(book, holdings, now, covered);
  if (may_remove)
    for (const std::string& name : gone) result.removed.push_back(book.take(name));

  std::set<std::string> still;  // conditions that hold now, so that a cleared one may warn again
  for (size_t h = 0; h < holdings.size(); ++h) {
    warn_compute_only(holdings[h], still, result);
    if (covered[h] || holdings[h].memory_ids.empty()) continue;
    adopt_uncovered(gpus, book, holdings[h], now, result);
  }
  for (auto it = warned_.begin(); it != warned_.end();) it = still.count(*it) ? std::next(it) : warned_.erase(it);
  return result;
}

void Reconciler::link_only(AllocationBook& book, const std::vector<Holding>& holdings, Clock::time_point now) const {
  std::vector<bool> covered(holdings.size(), false);
  link_or_age(book, holdings, now, covered);
}

std::vector<std::string> Reconciler::link_or_age(AllocationBook& book, const std::vector<Holding>& holdings,
                                                 Clock::time_point now, std::vector<bool>& covered) const {
  const HolderIndex holders_of = index_holders(holdings);
  std::vector<std::string> gone;
  book.update_each([&](const std::string& name, Allocation& a) {
    std::vector<size_t> holders;
    for (uint32_t u : a.units)
      if (auto found = holders_of.find({a.gpu_uuid, u}); found != holders_of.end())
        holders.insert(holders.end(), found->second.begin(), found->second.end());
    if (!holders.empty()) {
      link(a, holdings, holders, now, covered);
    } else if (absent_long_enough(a, now)) {
      gone.push_back(name);
    }
  });
  return gone;
}

bool Reconciler::absent_long_enough(Allocation& a, Clock::time_point now) const {
  if (a.seen && !a.absent_since) a.absent_since = now;
  return a.seen ? now - *a.absent_since >= removal_delay_ : now - a.created >= unseen_grace_;
}

void Reconciler::warn_compute_only(const Holding& hold, std::set<std::string>& still, ReconcileResult& result) {
  if (!hold.memory_ids.empty() || hold.compute_ids.empty()) return;
  const std::string key = "compute-only " + hold.workload.text();
  still.insert(key);
  if (warned_.insert(key).second)
    result.warnings.push_back(fmt::format(
        "container {} holds {} {} but no {}: it may not start (ask for memory too; compute is a share of the "
        "GPU the memory is on)",
        hold.workload.text(), hold.compute_ids.size(), kComputeResource, kMemoryResource));
}

}  // namespace cuslice::device_plugin
