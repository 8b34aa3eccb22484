// The scheduler's shared segment, mapped read-only for `cuslice status` and `cuslice run`
// (common/segment_mapping.h): the tool can show it to anyone allowed to read
// /dev/shm/<name>, without the daemon's help and without any way to change it. What is
// cuslice's own here is saying, as an Error with its exit status, why it cannot.
#pragma once

#include <string>

#include "common/segment_mapping.h"
#include "protocol/shm_protocol.h"

namespace cuslice::cli {

class SegmentMapping {
 public:
  // Maps `name` (e.g. "/cuslice"). Throws Error: kNoScheduler when it does not exist,
  // kFailure when it cannot be read or is not a segment of a compatible ABI (magic, major).
  explicit SegmentMapping(const std::string& name);

  const shm::Segment& operator*() const { return *segment_; }

 private:
  MappedSegment segment_;
};

}  // namespace cuslice::cli
