// JournalKeeper (journal_keeper.h): the entries from the suspensions, and the checks of what
// an earlier daemon left.
#include "scheduler/preemption/journal_keeper.h"

#include <spdlog/spdlog.h>

#include "scheduler/os/process_info.h"

namespace cuslice {

JournalKeeper::JournalKeeper(std::string path, const SharedSegment& segment)
    : journal_(std::move(path)), segment_(segment) {}

void JournalKeeper::write(const Suspensions& suspensions, const MemoryPreemption& policy) const {
  std::vector<JournalEntry> entries;
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    const SuspendState state = policy.state(t);
    if (state == SuspendState::kRunning || suspensions[t].processes.empty()) continue;
    JournalEntry e{segment_->tenants[t].name, to_string(state), policy.reason(t), {}};
    for (const Suspension::Process& p : suspensions[t].processes) e.processes.push_back({p.pid, p.start_time, p.bytes});
    entries.push_back(std::move(e));
  }
  journal_.write(entries);
}

std::optional<JournalKeeper::Found> JournalKeeper::still_suspended(const JournalEntry& entry,
                                                                   CheckpointApi* api) const {
  Found found{shm::kMaxTenants, {}};
  for (uint32_t i = 0; i < shm::kMaxTenants; ++i)
    if (segment_->tenants[i].state.load() != shm::Tenant::kFree && entry.tenant == segment_->tenants[i].name)
      found.tenant = i;
  for (const JournalEntry::Process& p : entry.processes) {
    Suspension::Process sp;
    sp.pid = p.pid;
    sp.start_time = p.start_time;
    sp.bytes = p.bytes;
    sp.bytes.resize(shm::kMaxGpus);
    sp.adopted = true;
    if (sp.pid <= 0 || process_start_time(sp.pid) != sp.start_time) continue;  // gone
    const CheckpointApi::State state = api ? api->state(sp.pid) : CheckpointApi::State::kGone;
    if (state != CheckpointApi::State::kLocked && state != CheckpointApi::State::kCheckpointed) continue;
    found.processes.push_back(std::move(sp));
  }
  if (found.processes.empty()) return std::nullopt;
  if (found.tenant == shm::kMaxTenants) {
    for (const auto& p : found.processes)
      spdlog::error("pid {} of tenant {} was left suspended by an earlier scheduler, and the tenant is not in the "
                    "configuration: resume it with `cuda-checkpoint --toggle --pid {}`",
                    p.pid, entry.tenant, p.pid);
    return std::nullopt;
  }
  return found;
}

}  // namespace cuslice
