// Admitting a hook's process into a tenant and letting it go: the tenant by the assignment
// rules (or a device plugin tenant's credential and pod), a free process slot in the segment,
// the slot's records reset for the newcomer, and the tenant's region to hand over with the
// reply. On release, the bytes the process was charged are given back, and a removed tenant's
// entry is freed with its last process.
//
// Owns nothing but the decisions: writes the segment's process slots, the tenant regions'
// process records and the ProcessTable; reads the tenant table, and frees a retired entry. Never reads a socket, never
// checks who may use which socket (the ClientServer did), never touches the token.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "protocol/socket_protocol.h"
#include "scheduler/segment/process_table.h"
#include "scheduler/segment/shared_segment.h"
#include "scheduler/segment/tenant_regions.h"
#include "scheduler/tenants/tenant_table.h"

namespace cuslice {

struct Peer {  // the kernel's word on a connection's process, taken when it was accepted
  pid_t pid = 0;  // SO_PEERCRED
  uid_t uid = 0;
  gid_t gid = 0;
  uint64_t start_time = 0;  // process_handle.h: read at accept, while its pidfd showed it alive
  std::string cgroup;       // likewise; never read again when the first message arrives
};

struct Admission {
  wire::RegisterStatus status = wire::RegisterStatus::kRefused;
  std::string message;  // why not
  uint32_t slot = 0, tenant = 0;
  uint64_t slot_generation = 0, segment_generation = 0;
  std::string shm_name;  // the segment's
  int region_fd = -1;    // the tenant's region, for the reply
  int segment_fd = -1;   // the segment, read-only, for the reply
  uint32_t flags = 0;    // wire::RegisterReply::kJoinMps
};

class Registrar {
 public:
  // Process slots one tenant may hold, whatever users its processes run as: a quarter of
  // them, as for one user, so that users who share a tenant cannot fill the segment.
  static constexpr int kMaxProcessesPerTenant = static_cast<int>(shm::kMaxProcesses) / 4;
  // The last kReservedSlots free slots go only to tenants with fewer than
  // kSmallTenantProcesses processes: several tenants that each stay under their limit still
  // leave every other tenant a few.
  static constexpr uint32_t kReservedSlots = 64;
  static constexpr int kSmallTenantProcesses = 4;

  Registrar(SharedSegment& segment, TenantRegions& regions, TenantTable& tenants, ProcessTable& processes);

  // pre: the request's version and size are checked, and the peer is within its user's
  // limits. kOk, kRefused (the rules said no: the caller logs it) or kFull (no slot, or none
  // the tenant may take: the hook then fails, never runs unscheduled).
  Admission admit(const Peer& peer, const wire::RegisterRequest& request);
  // The process in `slot` left. True when its tenant had been removed and its entry is now
  // free (the policies must forget the tenant).
  bool release(uint32_t slot);

 private:
  // The free process slots: the first (kMaxProcesses: none) and how many.
  struct FreeSlots {
    uint32_t first = shm::kMaxProcesses;
    uint32_t count = 0;
  };
  // admit()'s steps. The active segment entry named `name`, or kNoTenant.
  uint32_t active_tenant(const std::string& name) const;
  FreeSlots free_slots() const;
  // Why the tenant may not take a slot now (no entry, no slot, its limit, the reserved
  // slots); empty when it may.
  std::string capacity_problem(uint32_t tenant, const std::string& name, const FreeSlots& slots) const;
  // The tenant's region, created if it failed at the tenant's addition; empty, or why not.
  std::string ensure_region(uint32_t tenant, const std::string& name);
  // Writes the newcomer's records into `slot` of entry `tenant`; returns the slot's new
  // generation.
  uint64_t fill_slot(uint32_t slot, uint32_t tenant, const Peer& peer, const wire::RegisterRequest& request);
  // Whether the newcomer connects to the scheduler's MPS server: its tenant runs side by side
  // on all its GPUs, the server runs, and it serves the newcomer's user (MPS serves one user
  // at a time: a process of another user would wait inside cuInit until every client of the
  // first has gone).
  bool joins_mps(uint32_t tenant, const Peer& peer) const;

  SharedSegment& segment_;
  TenantRegions& regions_;
  TenantTable& tenants_;
  ProcessTable& processes_;
};

}  // namespace cuslice
