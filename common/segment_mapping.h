// The scheduler's shared segment, mapped read-only for one look: what `cuslice status` and
// `cuslice run` read (cli/segment_mapping.h says in the tool's terms why it cannot), and where
// the Kubernetes node agents see the scheduler's other tenants (node/scheduler_client.h).
// Mapped PROT_READ: a reader can never change the segment. Only a segment of this build's
// layout (magic, ABI major) is mapped; any state is fine (starting, running, stopped).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "protocol/shm_protocol.h"

namespace cuslice {

struct SegmentUnmap {
  void operator()(const shm::Segment* segment) const;
};
using MappedSegment = std::unique_ptr<const shm::Segment, SegmentUnmap>;

struct SegmentOpening {
  enum class Problem { kNone, kCannotOpen, kNotASegment, kOtherAbi };
  MappedSegment segment;  // null unless kNone
  Problem problem = Problem::kNone;
  int error = 0;             // errno, with kCannotOpen (ENOENT: no such segment)
  uint16_t found_major = 0;  // with kOtherAbi
};

// Maps the segment `name` (e.g. "/cuslice", as shm_open takes it) read-only.
SegmentOpening map_segment(const std::string& name);

}  // namespace cuslice
