// The other processes registered in the segment: whether other tenants (and ones of higher
// priority) share the GPUs, whether a pid belongs to this process's tenant, and what the
// tenant's processes charged (its memory reconciliation). Scans the process slots, so the
// hook calls it now and then, never per launch.
#include <atomic>

#include "hook/link/client.h"
#include "hook/link/client_state.h"
#include "protocol/socket_protocol.h"

namespace cuslice::client {

using namespace internal;

Neighbours neighbours() noexcept {
  Neighbours n;
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return n;
  const shm::Tenant& own = att->segment->tenants[att->tenant];
  const uint32_t mine = own.priority.load(std::memory_order_relaxed);
  n.capped = own.limit_ppm.load(std::memory_order_relaxed) < 1'000'000;
  // An MPS client's channels are its server's: their time slices are not the process's to set.
  if ((att->reply_flags & wire::RegisterReply::kJoinMps) == 0)
    n.lower_timeslice_us = att->segment->lower_timeslice_us.load(std::memory_order_relaxed);
  for (const shm::ProcessSlot& p : att->segment->processes) {
    if (p.state.load(std::memory_order_relaxed) != shm::ProcessSlot::kActive) continue;
    const uint32_t t = p.tenant.load(std::memory_order_relaxed);
    if (t == att->tenant && &p != &att->segment->processes[att->slot]) n.siblings = true;
    if (t == att->tenant || t >= shm::kMaxTenants) continue;
    n.others = true;
    if (att->segment->tenants[t].priority.load(std::memory_order_relaxed) > mine)
      n.higher = true;
    else
      n.peers = true;
  }
  return n;
}

bool tenant_pid(int pid) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return false;
  for (const shm::ProcessSlot& p : att->segment->processes)
    if (p.state.load(std::memory_order_relaxed) == shm::ProcessSlot::kActive &&
        p.pid.load(std::memory_order_relaxed) == pid && p.tenant.load(std::memory_order_relaxed) == att->tenant)
      return true;
  return false;
}

size_t tenant_processes(int gpu, int64_t now_ns, TenantProcess* out, size_t max) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr || static_cast<unsigned>(gpu) >= kMaxGpus) return 0;
  const uint32_t bit = 1u << gpu;
  size_t n = 0;
  for (uint32_t slot = 0; slot < shm::kMaxProcesses && n < max; ++slot) {
    const shm::ProcessSlot& p = att->segment->processes[slot];
    if (p.state.load(std::memory_order_acquire) != shm::ProcessSlot::kActive ||
        p.tenant.load(std::memory_order_relaxed) != att->tenant)
      continue;
    // The region is the tenant's own: its records are written by its processes, which may
    // spoil only their own tenant's figures.
    const shm::ProcessUse& use = att->region->processes[slot];
    const bool young = (use.young_gpus.load(std::memory_order_seq_cst) & bit) != 0 &&
                       use.young_until_ns.load(std::memory_order_seq_cst) > now_ns;
    out[n++] = {p.pid.load(std::memory_order_relaxed), young, slot == att->slot,
                use.charged[gpu].load(std::memory_order_acquire)};
  }
  return n;
}

}  // namespace cuslice::client
