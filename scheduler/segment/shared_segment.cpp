// SharedSegment (shared_segment.h): the segment created fresh under its lock, and the
// read-only descriptor of it that registered processes are handed.
#include "scheduler/segment/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>

#include "scheduler/os/os_fds.h"

namespace cuslice {

SharedSegment::SharedSegment(std::string name, uint64_t generation) : name_(std::move(name)) {
  // A segment of that name is either a live daemon's (write-locked: only its user or root can
  // open it for writing) or a dead one's (replaced). The read locks any reader may take on it
  // do not count.
  if (const int old = shm_open(name_.c_str(), O_RDONLY | O_CLOEXEC, 0); old >= 0) {
    const pid_t holder = write_lock_holder(old);
    close(old);
    if (holder != 0) {
      throw std::runtime_error("another scheduler" +
                               (holder > 0 ? " (pid " + std::to_string(holder) + ")" : std::string()) +
                               " serves the shared memory " + name_ + ": give this one another --shm-name");
    }
  }
  shm_unlink(name_.c_str());
  fd_ = shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, shm::kSegmentMode);
  if (fd_ < 0) {
    struct stat st {};
    const int err = errno;
    if (err == EEXIST && stat(("/dev/shm" + name_).c_str(), &st) == 0) {
      throw std::runtime_error("/dev/shm" + name_ + " exists, belongs to uid " + std::to_string(st.st_uid) +
                               " and cannot be replaced: remove it, or give this scheduler another --shm-name");
    }
    throw std::system_error(err, std::generic_category(), "shm_open " + name_);
  }
  // Readable by every process that may register, whatever the daemon's umask; written by the
  // daemon alone. Locked for the daemon's life (a second daemon sees it held).
  if (lock_whole_file(fd_) != 0 || fchmod(fd_, shm::kSegmentMode) != 0 || ftruncate(fd_, sizeof(shm::Segment)) != 0) {
    const int err = errno;
    close(fd_);
    shm_unlink(name_.c_str());
    throw std::system_error(err, std::generic_category(), "locking and sizing " + name_);
  }
  // The same file read-only, through this process's own descriptor rather than the name:
  // what tenants are given must not let them write it.
  readonly_fd_ = open(("/proc/self/fd/" + std::to_string(fd_)).c_str(), O_RDONLY | O_CLOEXEC);
  void* p = readonly_fd_ < 0 ? MAP_FAILED : mmap(nullptr, sizeof(shm::Segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  const int err = errno;
  if (p == MAP_FAILED) {
    if (readonly_fd_ >= 0) close(readonly_fd_);
    close(fd_);
    shm_unlink(name_.c_str());
    throw std::system_error(err, std::generic_category(), "opening and mapping " + name_);
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
  close(readonly_fd_);
  close(fd_);
}

}  // namespace cuslice
