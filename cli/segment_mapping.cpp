#include "cli/segment_mapping.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cli/error.h"

namespace cuslice::cli {

SegmentMapping::SegmentMapping(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) {
    const int err = errno;
    // No segment: no scheduler ran under that name, or it stopped cleanly.
    throw Error(err == ENOENT ? ExitCode::kNoScheduler : ExitCode::kFailure,
                fmt::format("cannot open the shared segment {}: {}", name, std::strerror(err)),
                err == ENOENT ? "is cuslice-scheduler running? (or pass --shm-name / --socket)" : "");
  }
  struct stat st {};
  const bool sized = fstat(fd, &st) == 0 && st.st_size >= static_cast<off_t>(sizeof(shm::Segment));
  void* p = sized ? mmap(nullptr, sizeof(shm::Segment), PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  close(fd);
  if (p == MAP_FAILED)
    throw Error(ExitCode::kFailure, fmt::format("{} is not a cuslice segment this version can read", name));
  segment_ = static_cast<const shm::Segment*>(p);
  size_ = sizeof(shm::Segment);
  // Any state is fine to show (starting, running, stopped); the layout must be ours.
  if (segment_->magic != shm::kMagic || segment_->abi_major != shm::kAbiMajor) {
    const uint16_t major = segment_->abi_major;
    munmap(p, size_);
    throw Error(ExitCode::kFailure,
                fmt::format("{} is not a cuslice segment of ABI {} (found magic/major {})", name, shm::kAbiMajor, major),
                "use the cuslice that matches the running cuslice-scheduler");
  }
}

SegmentMapping::~SegmentMapping() { munmap(const_cast<shm::Segment*>(segment_), size_); }

}  // namespace cuslice::cli
