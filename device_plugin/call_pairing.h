// Which memory call and which compute call are one container's, while the kubelet admits it.
//
// The kubelet admits one container at a time, and calls GetPreferredAllocation then Allocate
// for each resource the container asks for, back to back, in no fixed order (that of the pod
// spec's limits, a Go map). It records each call's IDs as the container's as soon as the
// plugin has answered, and the PodResources API lists them from then on. So:
//   1. A compute call right after a memory call still waiting is taken as that container's,
//      when the compute fits that allocation's GPU (allocate_request.h); otherwise it waits.
//   2. A memory call right after a compute call still waiting takes its compute.
//   3. A memory call right after a compute call, paired or not, asks PodResources whose its
//      IDs are (the ledger's resolve_pairing): a container that holds no memory yet is the
//      one being admitted, whose memory this is; one that holds memory was the container
//      before. Rule 1 guesses where a container asking for one resource, followed by one
//      asking for both, makes the same calls as the other way round; this settles it.
// A call waits for `window` at most (the kubelet makes a container's calls within
// milliseconds). PodResources (reconciliation.h) and the check at the container's start
// (container_start.h) still have the last word: pairing informs placement only.
//
// Holds the last call only; decides nothing about GPUs (allocate_request.h does, with it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "device_plugin/allocation_book.h"

namespace cuslice::device_plugin {

class CallPairing {
 public:
  explicit CallPairing(Clock::duration window) : window_(window) {}

  // The tenant of the memory call just before, while it waits to be paired.
  std::optional<std::string> memory_waiting(Clock::time_point now) const;
  // The compute (percent) of the compute call just before, while it waits to be paired.
  std::optional<uint32_t> compute_waiting(Clock::time_point now) const;
  // The IDs of the compute call just before, paired or not (rule 3); null when the call just
  // before was not a compute call.
  const std::vector<std::string>* last_compute(Clock::time_point now) const;

  // A memory call made the allocation `tenant`; it waits unless it took the compute waiting.
  void memory_call(const std::string& tenant, bool paired, Clock::time_point now);
  // A compute call of these IDs was answered; it waits unless it paired with the memory call
  // waiting.
  void compute_call(const std::vector<std::string>& ids, bool paired, Clock::time_point now);
  // Rule 3 settled whose the compute call just before was: the next memory call's (it waits)
  // or the container's before (it does not).
  void settle_compute(bool waits) { waiting_ = waits; }
  // A call was refused: the kubelet rejects the pod, and its other call never comes.
  void clear() { last_ = Kind::kNone; }

 private:
  enum class Kind { kNone, kMemory, kCompute };
  bool recent(Clock::time_point now) const { return now - at_ <= window_; }

  Clock::duration window_;
  Kind last_ = Kind::kNone;
  bool waiting_ = false;
  std::string tenant_;                     // kMemory
  std::vector<std::string> compute_ids_;  // kCompute
  Clock::time_point at_{};
};

}  // namespace cuslice::device_plugin
