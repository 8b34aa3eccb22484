// The suspension journal: what is suspended, written beside the control socket before the
// first driver call of every suspension and after every change, so that a scheduler started
// again finds the processes an earlier one left locked or checkpointed and resumes them.
// A JSON file, replaced whole by rename so that a crash never leaves half of one. Owns the
// file's format and its writing; what the entries mean is the Preemptor's.
//
// pre: the journal's directory is one only the scheduler's user (or root) can write: the
// control socket's, which the daemon checks. Even so no link is followed (O_NOFOLLOW on every
// open): a link found in the journal's place is refused, never written through.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cuslice {

struct JournalEntry {
  struct Process {
    int32_t pid = 0;
    uint64_t start_time = 0;
    std::vector<uint64_t> bytes;  // by GPU
  };
  std::string tenant, state, reason;
  std::vector<Process> processes;
};

class SuspensionJournal {
 public:
  explicit SuspensionJournal(std::string path) : path_(std::move(path)) {}

  // Replaces the journal with `entries`; removes it when there are none. Failures are logged:
  // the daemon runs on, and a restarted one would not know what is suspended.
  void write(const std::vector<JournalEntry>& entries) const;
  // The entries of the journal; none when there is no journal, and none (logged, with what to
  // do by hand) when it cannot be read. Entries without a tenant or processes are skipped.
  std::vector<JournalEntry> read() const;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace cuslice
