// What `cuslice status` prints, from a snapshot of the segment: a table for people and a
// JSON document for programs. Pure functions, so tests check the exact output.
//
// The JSON schema is versioned (`schema_version`) and documented in docs/reference/operations.md;
// fields are only ever added within a version. Quantities are in base units (bytes,
// seconds) and shares are ratios in [0, 1], as in the metrics; null means "unknown" or
// "none" (a quota the card's size cannot resolve yet, a token nobody holds).
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>

#include "common/segment_snapshot.h"
#include "scheduler/segment/workload.h"

namespace cuslice::cli {

inline constexpr int kStatusSchemaVersion = 1;

// What the tool knows about the daemon besides the segment.
struct DaemonView {
  std::string socket_path;
  std::string shm_name;
  bool reachable = false;                  // answered on the socket just now
  std::optional<std::string> config_path;  // when it answered and has a file
  TenantWorkloads workloads;               // Kubernetes namespace/pod/container by tenant
  // Memory preemption: why each tenant with something to say is in its state (the daemon's
  // answer to kPreemption), by name.
  std::map<std::string, std::string> preemption_reasons;
  // The fast suspension's figures, by tenant name (the same answer's "@facts" lines).
  struct PreemptionFacts {
    std::string path;             // the last suspension's: "fast", "checkpoint", or empty
    uint64_t moved_out = 0;       // what the last suspension took off the card
    uint64_t host_pool = 0;       // pinned host memory its processes prepared
    uint64_t movable = 0;         // what its processes' hooks can move
    double time_to_room = 0;      // seconds its last request that needed room waited for it
  };
  std::map<std::string, PreemptionFacts> preemption_facts;
};

nlohmann::json status_json(const SegmentSnapshot& snapshot, const DaemonView& daemon);
std::string status_table(const SegmentSnapshot& snapshot, const DaemonView& daemon);

// "1.5 GiB", "512 MiB", "0 B": binary units, three significant digits.
std::string format_bytes(uint64_t bytes);
// "0.4s", "12.3s", "4m05s", "2h07m".
std::string format_seconds(double seconds);

}  // namespace cuslice::cli
