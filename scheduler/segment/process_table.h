// The daemon's own record of the hook processes registered with it, by process slot: the pid
// and uid their connection carried, the tenant they were accepted into, their start time,
// the workload they said they run in and what they claimed the checkpoint cannot move. Written by the clients component alone, when a process
// registers and when it leaves; read by scheduling, preemption and the usage check, which
// must take a process's tenant and slot from here and never from anything a tenant can
// write. Touches neither the segment nor the tenant regions.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <vector>

#include "protocol/shm_protocol.h"
#include "scheduler/segment/workload.h"

namespace cuslice {

struct ProcessRecord {
  uint32_t slot = 0;
  uint32_t tenant = shm::kNoTenant;
  pid_t pid = 0;
  uid_t uid = 0;
  uint64_t start_time = 0;  // process_info.h: tells this process from a later one with its pid
  Workload workload;        // empty until the process sends a WorkloadMessage
  // shm::kUses*: what the process said, on its own connection (wire::BlockerClaim), it uses
  // that the driver's checkpoint cannot move. Only ever grows while the process lives.
  uint32_t checkpoint_claims = 0;
  // Told to connect to the scheduler's MPS server (wire::RegisterReply::kJoinMps).
  bool mps = false;
};

class ProcessTable {
 public:
  ProcessTable();

  // pre: record.slot < kMaxProcesses, record.tenant < kMaxTenants, the slot holds nobody.
  void add(const ProcessRecord& record);
  // The slot's process left; nothing when the slot holds nobody.
  void remove(uint32_t slot);
  void set_workload(uint32_t slot, const Workload& workload);
  void add_checkpoint_claims(uint32_t slot, uint32_t flags);
  void set_mps(uint32_t slot);

  // Every registered process, in no particular order. Invalidated by add() and remove().
  const std::vector<ProcessRecord>& all() const { return records_; }
  // The slot's process, or nullptr.
  const ProcessRecord* at(uint32_t slot) const;
  // How many registered processes tenant entry t has.
  int in_tenant(uint32_t t) const { return t < shm::kMaxTenants ? per_tenant_[t] : 0; }

 private:
  std::vector<ProcessRecord> records_;                   // dense: a step walks only these
  std::array<int32_t, shm::kMaxProcesses> position_{};   // slot -> index in records_, or -1
  std::array<int, shm::kMaxTenants> per_tenant_{};
};

}  // namespace cuslice
