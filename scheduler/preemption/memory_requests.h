// The hooks' requests for room (wire::MemoryRequest: an allocation that did not fit the card)
// and the decisions on them: each is kept while its hook waits (the configuration's
// allocation_wait), decided with every other request of the same wake-up by the policy
// (memory_preemption.h), and answered in the asker's slot: retry (it fits now), refused, or
// nothing yet while suspensions chosen for it (SuspensionOperations) make room.
//
// Owns the pending requests, their bounds, and by tenant the last refusal and how long the last
// request that needed room waited for it. Writes the answers in the processes' slots; reads
// the segment's allocation wait. Never touches the tenants' words, the suspender or the hooks'
// orders: it calls SuspensionOperations to suspend, and is told what operations freed.
#pragma once

#include <optional>
#include <string>

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "protocol/shm_protocol.h"
#include "protocol/socket_protocol.h"
#include "scheduler/preemption/memory_facts.h"
#include "scheduler/preemption/memory_preemption.h"
#include "scheduler/preemption/suspension_operations.h"
#include "scheduler/segment/process_table.h"
#include "scheduler/segment/shared_segment.h"

namespace cuslice {

class MemoryRequests {
 public:
  using Nanos = std::chrono::nanoseconds;
  static constexpr Nanos kNever = MemoryPreemption::kNever;
  // Bounds on pending requests for room: per process, per user, overall. A request past one
  // is refused at once.
  static constexpr std::ptrdiff_t kMaxWaitsPerProcess = 16;
  static constexpr std::ptrdiff_t kMaxWaitsPerUid = 64;
  static constexpr size_t kMaxWaits = 256;

  MemoryRequests(SharedSegment& segment, const MemoryFacts& facts, MemoryPreemption& policy,
                 SuspensionOperations& operations);

  // A registered process's request (clients hand it over as it arrives); decided at the next
  // decide() with every other request of the same wake-up.
  void on_request(const ProcessRecord& process, const wire::MemoryRequest& request);
  // The process in `slot` left: its requests go with it.
  void forget(uint32_t slot);
  // What operations freed, by GPU, counts for every request waiting on that GPU.
  void credit(const std::vector<uint64_t>& freed);
  // Requests or outcomes arrived since the requests were last decided.
  void mark_due() { due_ = true; }
  bool due() const { return due_; }
  // Decides every request still waited for (once for all of them).
  void decide();

  bool empty() const { return waits_.empty(); }
  // The earliest time a hook gives up waiting, kNever when none waits.
  Nanos earliest_deadline() const;
  // Bytes, by GPU, of the requests still waited for at `now`.
  std::vector<uint64_t> pending(Nanos now) const;
  // Drops the requests whose hooks gave up.
  void drop_expired(Nanos now);

  // For `cuslice status`: why tenant t's last request was refused (nullptr: none was), how
  // long its last request that needed room waited for it (0: none did).
  const std::string* last_refusal(uint32_t t) const;
  Nanos time_to_room(uint32_t t) const { return time_to_room_[t]; }

 private:
  struct Wait {  // an allocation waiting for room (a MemoryRequest not yet answered)
    uint32_t slot = 0;
    int32_t pid = 0;
    uid_t uid = 0;
    uint32_t tenant = 0, gpu = 0, sequence = 0;
    uint64_t bytes = 0;
    uint64_t reported_free = 0;  // the card's free memory as the hook's driver said
    uint64_t freed = 0;          // by suspensions completed since
    bool waiting = false;        // told to wait for operations under way (logged once)
    Nanos asked{0}, deadline{0};
  };

  void answer(uint32_t slot, uint32_t sequence, shm::MemoryDecision decision);
  // Past a bound (kMaxWaits*)?
  bool too_many(uint32_t slot, uid_t uid) const;
  // Acts on the policy's verdict on `w`; true while w is still waited for.
  bool settle(Wait& w, const Verdict& v, Nanos now);
  // Why no allocation of the asker's could need what it asks (nullopt: it could).
  std::optional<std::string> unfounded(const Wait& w, uint64_t card_total) const;
  Verdict refusal(const Wait& w, const std::string& why) const;

  SharedSegment& segment_;
  const MemoryFacts& facts_;
  MemoryPreemption& policy_;
  SuspensionOperations& operations_;
  std::vector<Wait> waits_;
  bool due_ = false;
  std::map<uint32_t, std::string> last_refusal_;
  std::array<Nanos, shm::kMaxTenants> time_to_room_{};
};

}  // namespace cuslice
