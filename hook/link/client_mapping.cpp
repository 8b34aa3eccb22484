// Attaching's mappings (client_mapping.h): the segment, checked to be the daemon's, the
// tenant region, checked to be sealed and the tenant's, and the page the attachment lives in.
// Calls shm_open, mmap and fcntl on the attach path only; registers nothing.
#include "hook/link/client_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "hook/link/client_state.h"

namespace cuslice::client::internal {
namespace {

// Maps the segment the reply brought (`segment_fd`, closed here) or, from a daemon that
// sends none, the one it names, read-only, and checks that the daemon made it: owned by the
// daemon's user (`daemon_uid`, from SO_PEERCRED) or root, writable by nobody else, and the one
// the daemon registered us in.
const shm::Segment* map_segment(const wire::RegisterReply& reply, uid_t daemon_uid, int segment_fd) {
  char name[shm::kNameSize];
  memcpy(name, reply.shm_name, sizeof name);
  name[sizeof name - 1] = '\0';
  const int fd = segment_fd >= 0 ? segment_fd : shm_open(name, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) {
    set_error("cannot open the scheduler's shared memory", strerror(errno));
    return nullptr;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (st.st_uid != daemon_uid && st.st_uid != 0) ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    close(fd);
    char detail[128];
    snprintf(detail, sizeof detail, "%s is owned by uid %u with mode %03o; the scheduler runs as uid %u", name,
             static_cast<unsigned>(st.st_uid), static_cast<unsigned>(st.st_mode & 07777),
             static_cast<unsigned>(daemon_uid));
    set_error("refusing the scheduler's shared memory", detail);
    return nullptr;
  }
  void* p = MAP_FAILED;
  if (static_cast<size_t>(st.st_size) >= sizeof(shm::Segment))
    p = mmap(nullptr, sizeof(shm::Segment), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    set_error("cannot map the scheduler's shared memory", "too small or not mappable");
    return nullptr;
  }
  const auto* seg = static_cast<const shm::Segment*>(p);
  if (!shm::compatible(*seg, sizeof(shm::Segment)) || seg->generation != reply.segment_generation ||
      reply.slot >= shm::kMaxProcesses || reply.tenant >= shm::kMaxTenants ||
      seg->processes[reply.slot].generation.load(std::memory_order_acquire) != reply.slot_generation) {
    munmap(p, sizeof(shm::Segment));
    set_error("the scheduler's shared memory is not the one it registered us in", "");
    return nullptr;
  }
  return seg;
}

// Maps the tenant region the reply brought (`fd`, closed here), read-write, after checking
// that it is sealed against resizing (so no process of the tenant can make this one fault)
// and is the region of the tenant and segment the reply names.
shm::TenantRegion* map_region(int fd, const wire::RegisterReply& reply) {
  if (fd < 0) {
    set_error("the scheduler's reply brought no tenant region", "");
    return nullptr;
  }
  struct stat st {};
  const int seals = fcntl(fd, F_GET_SEALS);
  void* p = MAP_FAILED;
  if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= sizeof(shm::TenantRegion) && seals >= 0 &&
      (static_cast<unsigned>(seals) & shm::kTenantRegionSeals) == shm::kTenantRegionSeals)
    p = mmap(nullptr, sizeof(shm::TenantRegion), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    set_error("cannot map the tenant region", "too small, not sealed or not mappable");
    return nullptr;
  }
  auto* region = static_cast<shm::TenantRegion*>(p);
  if (!shm::compatible(*region, sizeof(shm::TenantRegion), reply.segment_generation, reply.tenant)) {
    munmap(p, sizeof(shm::TenantRegion));
    set_error("the tenant region is not the one the scheduler registered us in", "");
    return nullptr;
  }
  return region;
}

}  // namespace

// Maps what the accepted registration brought (`fds`: the tenant region and the segment,
// closed here) into a new Attachment: the segment, checked to be made by the daemon at the
// other end of `s`, and the tenant region. Null on failure, with `s` closed.
Attachment* map_attachment(int s, const wire::RegisterReply& reply, const int (&fds)[2]) {
  const int region_fd = fds[0];
  // Who the daemon is, from the kernel: the segment must be its user's (or root's).
  ucred daemon{};
  socklen_t cred_len = sizeof daemon;
  if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &daemon, &cred_len) != 0) {
    set_error("cannot learn the scheduler's user", strerror(errno));
    close_both(fds);
    close(s);
    return nullptr;
  }
  const shm::Segment* seg = map_segment(reply, daemon.uid, fds[1]);
  shm::TenantRegion* region = nullptr;
  if (seg != nullptr) {
    region = map_region(region_fd, reply);
    if (region == nullptr) munmap(const_cast<shm::Segment*>(seg), sizeof(shm::Segment));
  } else if (region_fd >= 0) {
    close(region_fd);
  }
  void* page = region ? mmap(nullptr, sizeof(Attachment), PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                      : MAP_FAILED;
  if (page == MAP_FAILED) {
    if (region) {
      set_error("cannot allocate the attachment", strerror(errno));
      munmap(region, sizeof(shm::TenantRegion));
      munmap(const_cast<shm::Segment*>(seg), sizeof(shm::Segment));
    }
    close(s);
    return nullptr;
  }
  const shm::SpatialState* spatial = shm::spatial_state(*seg);
  return new (page) Attachment{seg, region, reply.slot, reply.tenant, spatial ? &spatial->tenants[reply.tenant] : nullptr,
                               reply.flags};
}

}  // namespace cuslice::client::internal
