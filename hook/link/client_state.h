// The client's process-wide state, shared by its files (client.h is the API): the current
// attachment to a daemon, the connection, and what the process has told the client. For
// client_*.cpp only. The same rules as the API hold here: no allocation, no exceptions, no
// locks but AttachLock (attach paths only).
#pragma once

#include <atomic>
#include <cstdint>

#include "hook/link/client.h"
#include "protocol/clock.h"
#include "protocol/shm_protocol.h"

namespace cuslice::client::internal {

using shm::kMaxGpus;

// What one registration produced. Immutable once published through State::current and
// never freed: a thread may still read it (and the regions it points to) after the client
// has moved on to a newer daemon. Each lives in its own anonymous page, so that creating it
// does not call malloc; one page, one segment mapping and one tenant region mapping leak per
// daemon restart.
struct Attachment {
  const shm::Segment* segment;  // mapped read-only: the daemon's
  shm::TenantRegion* region;    // the tenant's, read-write
  uint32_t slot;                // < kMaxProcesses
  uint32_t tenant;              // < kMaxTenants
  // The tenant's record of running side by side (nullptr from a daemon without one), and
  // what the reply said (wire::RegisterReply::kJoinMps).
  const shm::TenantSpatial* spatial;
  uint32_t reply_flags;
  // This process's record and its tenant's counters for `gpu` (< kMaxGpus).
  shm::ProcessUse& self() const { return region->processes[slot]; }
  shm::TenantGpuUse& use(int gpu) const { return region->gpu[gpu]; }
  // Whether `holder`, GPU gpu's token holder, lets this process launch there: its tenant, or
  // the spatial group its tenant runs in.
  bool holds(uint32_t holder, int gpu) const {
    return holder == tenant || (holder == shm::kSpatialGroup && spatial != nullptr &&
                                ((spatial->group_gpus.load(std::memory_order_relaxed) >> gpu) & 1u) != 0);
  }
};

struct State {
  std::atomic<Attachment*> current{nullptr};  // nullptr: detached, everything ungated
  // The connection's descriptor. Its number stays the same across re-attaches (the new
  // socket is dup3()ed onto it), so a thread that read it just before a re-attach sends
  // its kick to a live connection rather than to a descriptor the application reused.
  std::atomic<int> fd{-1};
  std::atomic<uint64_t> local_charged[kMaxGpus] = {};  // this process's bytes, attached or not
  std::atomic<uint64_t> device_memory[kMaxGpus] = {};
  std::atomic<uint64_t> device_uuid[kMaxGpus][2] = {};  // CUuuid bytes 0-7, 8-15 (0: unknown)
  std::atomic<bool> refused{false};
  std::atomic<uint32_t> checkpoint_flags{0};  // shm::ProcessSlot::kUses*, published on attach
  std::atomic<uint32_t> memory_sequence{0};   // the last MemoryRequest's
  // Per GPU: token_try published a demand on the current attachment (one waiter counted in
  // the slot's flags) that token_unpark has not withdrawn.
  std::atomic<bool> parked[kMaxGpus] = {};
  std::atomic<int64_t> next_attempt_ns{0};
  std::atomic<int64_t> next_check_ns{0};
  std::atomic<bool> attaching{false};  // serialises attach, re-attach and detach
  std::atomic<EventCallback> callback{nullptr};
  char error[320] = {};
};
extern constinit State g;

// The daemon stopped (cleanly: segment state) or died (the socket reports EOF or an error;
// the daemon never sends after the reply, so anything readable means the end).
bool connection_lost(const Attachment* att);
// Detaches from `att` (unless another thread already moved on) and says so once.
void mark_lost(Attachment* att);
// Tells the daemon on `fd` what this process uses that the checkpoint cannot move
// (checkpoint_flags; wire::BlockerClaim), when anything. One send, no allocation.
void send_blocker_claim(int fd) noexcept;
// Writes "what: detail" (": detail" only when there is one) as the last error.
void set_error(const char* what, const char* detail);
// Closes those of `fds` that are open.
void close_both(const int (&fds)[2]);
// Asks the daemon for a scheduling step now (a kick on the connection). One send.
void send_kick() noexcept;

}  // namespace cuslice::client::internal
