// What the suspension journal (suspension_journal.h, the file) says of the tenants: the
// entries written from the suspensions at every change, and, at start, what an earlier daemon
// left suspended, checked process by process (alive with the start time recorded, locked or
// checkpointed as the driver says) before it is handed over to be adopted.
//
// Owns the journal file and the entries read at start until they are adopted. Reads the
// suspensions, the policy's states and the tenants' names; never changes a suspension, the
// policy or the segment (SuspensionOperations adopts what it finds).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/preemption/checkpoint_api.h"
#include "scheduler/preemption/memory_preemption.h"
#include "scheduler/preemption/suspension.h"
#include "scheduler/preemption/suspension_journal.h"
#include "scheduler/segment/shared_segment.h"

namespace cuslice {

class JournalKeeper {
 public:
  JournalKeeper(std::string path, const SharedSegment& segment);

  // Replaces the journal with what is suspended now (nothing: no journal).
  void write(const Suspensions& suspensions, const MemoryPreemption& policy) const;

  // Start-up: reads what an earlier daemon left, to adopt once the tenant table is applied.
  void read() { entries_ = journal_.read(); }
  const std::vector<JournalEntry>& entries() const { return entries_; }
  void forget_entries() { entries_.clear(); }
  // Of entry's processes, those still suspended (`api` says; none without it), with the tenant
  // entry they belong to. Nothing when none is, or when the tenant is not in the configuration
  // any more (then logged, with what to do by hand).
  struct Found {
    uint32_t tenant = 0;
    std::vector<Suspension::Process> processes;
  };
  std::optional<Found> still_suspended(const JournalEntry& entry, CheckpointApi* api) const;

 private:
  SuspensionJournal journal_;
  const SharedSegment& segment_;
  std::vector<JournalEntry> entries_;  // read at start, until adopted
};

}  // namespace cuslice
