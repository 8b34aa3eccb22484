// The scheduler's shared segment, mapped read-only for `cuslice status`: the tool can show
// it to anyone allowed to read /dev/shm/<name>, without the daemon's help and without any
// way to change it.
#pragma once

#include <string>

#include "protocol/shm_protocol.h"

namespace cuslice::cli {

class SegmentMapping {
 public:
  // Maps `name` (e.g. "/cuslice"). Throws Error: kNoScheduler when it does not exist,
  // kFailure when it cannot be read or is not a segment of a compatible ABI (magic, major).
  explicit SegmentMapping(const std::string& name);
  ~SegmentMapping();
  SegmentMapping(const SegmentMapping&) = delete;
  SegmentMapping& operator=(const SegmentMapping&) = delete;

  const shm::Segment& operator*() const { return *segment_; }

 private:
  const shm::Segment* segment_ = nullptr;
  size_t size_ = 0;
};

}  // namespace cuslice::cli
