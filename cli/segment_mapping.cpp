#include "cli/segment_mapping.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "cli/error.h"

namespace cuslice::cli {

SegmentMapping::SegmentMapping(const std::string& name) {
  SegmentOpening opened = map_segment(name);
  switch (opened.problem) {
    case SegmentOpening::Problem::kNone:
      segment_ = std::move(opened.segment);
      return;
    case SegmentOpening::Problem::kCannotOpen:
      // No segment: no scheduler ran under that name, or it stopped cleanly.
      throw Error(opened.error == ENOENT ? ExitCode::kNoScheduler : ExitCode::kFailure,
                  fmt::format("cannot open the shared segment {}: {}", name, std::strerror(opened.error)),
                  opened.error == ENOENT ? "is cuslice-scheduler running? (or pass --shm-name / --socket)" : "");
    case SegmentOpening::Problem::kNotASegment:
      throw Error(ExitCode::kFailure, fmt::format("{} is not a cuslice segment this version can read", name));
    case SegmentOpening::Problem::kOtherAbi:
      throw Error(ExitCode::kFailure,
                  fmt::format("{} is not a cuslice segment of ABI {} (found magic/major {})", name, shm::kAbiMajor,
                              opened.found_major),
                  "use the cuslice that matches the running cuslice-scheduler");
  }
}

}  // namespace cuslice::cli
