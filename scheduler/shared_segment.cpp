#include "shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <new>
#include <system_error>

namespace cuslice {

SharedSegment::SharedSegment(std::string name, uint64_t generation) : name_(std::move(name)) {
  shm_unlink(name_.c_str());  // a previous daemon's segment, if it crashed
  const int fd = shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, shm::kSegmentMode);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "shm_open " + name_);
  // Readable by every process that may register, whatever the daemon's umask; written by the
  // daemon alone.
  if (fchmod(fd, shm::kSegmentMode) != 0 || ftruncate(fd, sizeof(shm::Segment)) != 0) {
    const int err = errno;
    close(fd);
    shm_unlink(name_.c_str());
    throw std::system_error(err, std::generic_category(), "sizing " + name_);
  }
  void* p = mmap(nullptr, sizeof(shm::Segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name_.c_str());
    throw std::system_error(err, std::generic_category(), "mmap " + name_);
  }
  segment_ = new (p) shm::Segment{};
  segment_->magic = shm::kMagic;
  segment_->abi_major = shm::kAbiMajor;
  segment_->abi_minor = shm::kAbiMinor;
  segment_->total_size = sizeof(shm::Segment);
  segment_->generation = generation;
  for (shm::GpuState& gpu : segment_->gpus) gpu.holder.store(shm::kNoTenant, std::memory_order_relaxed);
  for (shm::Tenant& t : segment_->tenants) t.memory_quota.store(shm::kUnlimited, std::memory_order_relaxed);
}

SharedSegment::~SharedSegment() {
  munmap(segment_, sizeof(shm::Segment));
  shm_unlink(name_.c_str());
}

}  // namespace cuslice
