// The other processes registered in the segment: whether other tenants (and ones of higher
// priority) share the GPUs, and whether a pid belongs to this process's tenant. Scans the
// process slots, so the hook calls it now and then, never per launch.
#include <atomic>

#include "client.h"
#include "client_state.h"

namespace cuslice::client {

using namespace internal;

Neighbours neighbours() noexcept {
  Neighbours n;
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return n;
  const uint32_t mine = att->segment->tenants[att->tenant].priority.load(std::memory_order_relaxed);
  for (const shm::ProcessSlot& p : att->segment->processes) {
    if (p.state.load(std::memory_order_relaxed) != shm::ProcessSlot::kActive) continue;
    const uint32_t t = p.tenant.load(std::memory_order_relaxed);
    if (t == att->tenant || t >= shm::kMaxTenants) continue;
    n.others = true;
    if (att->segment->tenants[t].priority.load(std::memory_order_relaxed) > mine) n.higher = true;
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

}  // namespace cuslice::client
