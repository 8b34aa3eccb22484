#include "common/segment_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace cuslice {

void SegmentUnmap::operator()(const shm::Segment* segment) const {
  munmap(const_cast<shm::Segment*>(segment), sizeof(shm::Segment));
}

SegmentOpening map_segment(const std::string& name) {
  SegmentOpening out;
  const int fd = shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) {
    out.problem = SegmentOpening::Problem::kCannotOpen;
    out.error = errno;
    return out;
  }
  struct stat st {};
  const bool sized = fstat(fd, &st) == 0 && st.st_size >= static_cast<off_t>(sizeof(shm::Segment));
  void* p = sized ? mmap(nullptr, sizeof(shm::Segment), PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  close(fd);
  if (p == MAP_FAILED) {
    out.problem = SegmentOpening::Problem::kNotASegment;
    return out;
  }
  MappedSegment segment(static_cast<const shm::Segment*>(p));
  if (segment->magic != shm::kMagic || segment->abi_major != shm::kAbiMajor) {
    out.problem = SegmentOpening::Problem::kOtherAbi;
    out.found_major = segment->abi_major;
    return out;
  }
  out.segment = std::move(segment);
  return out;
}

}  // namespace cuslice
