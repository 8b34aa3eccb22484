// ProcessTable (process_table.h): a dense vector with an index by slot, so that the scheduling
// step walks only the processes that exist and a departure costs one swap.
#include "scheduler/segment/process_table.h"

namespace cuslice {

ProcessTable::ProcessTable() {
  position_.fill(-1);
  records_.reserve(shm::kMaxProcesses);
}

void ProcessTable::add(const ProcessRecord& record) {
  if (record.slot >= shm::kMaxProcesses || record.tenant >= shm::kMaxTenants || position_[record.slot] >= 0) return;
  position_[record.slot] = static_cast<int32_t>(records_.size());
  records_.push_back(record);
  ++per_tenant_[record.tenant];
}

void ProcessTable::remove(uint32_t slot) {
  if (slot >= shm::kMaxProcesses || position_[slot] < 0) return;
  const auto at = static_cast<size_t>(position_[slot]);
  --per_tenant_[records_[at].tenant];
  if (at + 1 != records_.size()) {
    records_[at] = std::move(records_.back());
    position_[records_[at].slot] = static_cast<int32_t>(at);
  }
  records_.pop_back();
  position_[slot] = -1;
}

void ProcessTable::set_workload(uint32_t slot, const Workload& workload) {
  if (slot < shm::kMaxProcesses && position_[slot] >= 0) records_[static_cast<size_t>(position_[slot])].workload = workload;
}

void ProcessTable::add_checkpoint_claims(uint32_t slot, uint32_t flags) {
  if (slot < shm::kMaxProcesses && position_[slot] >= 0)
    records_[static_cast<size_t>(position_[slot])].checkpoint_claims |= flags;
}

void ProcessTable::set_mps(uint32_t slot) {
  if (slot < shm::kMaxProcesses && position_[slot] >= 0) records_[static_cast<size_t>(position_[slot])].mps = true;
}

const ProcessRecord* ProcessTable::at(uint32_t slot) const {
  return slot < shm::kMaxProcesses && position_[slot] >= 0 ? &records_[static_cast<size_t>(position_[slot])] : nullptr;
}

}  // namespace cuslice
