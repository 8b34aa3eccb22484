#include "scheduler/segment/tenant_regions.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "protocol/saturating.h"

namespace cuslice {
namespace {

constexpr int kMaxAttempts = 64;

[[noreturn]] void fail(int err, const char* what) {
  throw std::system_error(err, std::generic_category(), what);
}

}  // namespace

TenantRegions::~TenantRegions() {
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) drop(t);
}

void TenantRegions::create(uint32_t tenant) {
  if (tenant >= shm::kMaxTenants) fail(EINVAL, "tenant region index");
  drop(tenant);
  const int fd = memfd_create("cuslice-tenant", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) fail(errno, "memfd_create for a tenant region");
  void* p = MAP_FAILED;
  if (ftruncate(fd, sizeof(shm::TenantRegion)) == 0)
    p = mmap(nullptr, sizeof(shm::TenantRegion), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    close(fd);
    fail(err, "sizing a tenant region");
  }
  // A new memfd reads as zeros, which is every word's initial value: only the header is
  // written, so that the pages of unused process records are never allocated.
  auto* region = static_cast<shm::TenantRegion*>(p);
  region->magic = shm::kTenantMagic;
  region->abi_major = shm::kAbiMajor;
  region->abi_minor = shm::kAbiMinor;
  region->total_size = sizeof(shm::TenantRegion);
  region->segment_generation = generation_;
  region->tenant = tenant;
  // Before anybody else has the descriptor: from here its size is fixed for good.
  if (fcntl(fd, F_ADD_SEALS, shm::kTenantRegionSeals) != 0) {
    const int err = errno;
    munmap(p, sizeof(shm::TenantRegion));
    close(fd);
    fail(err, "sealing a tenant region");
  }
  entries_[tenant] = {fd, region};
}

void TenantRegions::drop(uint32_t tenant) {
  if (tenant >= shm::kMaxTenants) return;
  Entry& e = entries_[tenant];
  if (e.region != nullptr) munmap(e.region, sizeof(shm::TenantRegion));
  if (e.fd >= 0) close(e.fd);
  e = {};
}

void add_saturating(std::atomic<uint64_t>& word, uint64_t amount) {
  uint64_t cur = word.load(std::memory_order_relaxed);
  for (int i = 0; i < kMaxAttempts; ++i) {
    const uint64_t next = saturating_add(cur, amount);
    if (word.compare_exchange_weak(cur, next, std::memory_order_acq_rel, std::memory_order_relaxed)) return;
  }
}

void sub_saturating(std::atomic<uint64_t>& word, uint64_t amount) {
  uint64_t cur = word.load(std::memory_order_relaxed);
  for (int i = 0; i < kMaxAttempts; ++i)
    if (word.compare_exchange_weak(cur, cur - std::min(cur, amount), std::memory_order_acq_rel,
                                   std::memory_order_relaxed))
      return;
}

uint64_t advance(uint64_t& seen, uint64_t reported, uint64_t bound) {
  if (reported <= seen) return 0;
  const uint64_t step = std::min(reported - seen, bound);
  seen += step;
  return step;
}

}  // namespace cuslice
