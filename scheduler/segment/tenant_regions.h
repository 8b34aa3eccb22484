// The tenant regions (shm_protocol.h, TenantRegion): one sealed memfd per tenant entry,
// created when the daemon gives an entry to a tenant, mapped read-write by the daemon for as
// long as the entry is that tenant's, and handed to the tenant's processes at registration
// (the clients component, registrar.h, decides who gets which). Also the arithmetic the daemon does on words a
// tenant can write: everything in a region is hostile input.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "protocol/shm_protocol.h"

namespace cuslice {

class TenantRegions {
 public:
  // Regions will carry `segment_generation`, so that a hook never takes one for another
  // daemon's.
  explicit TenantRegions(uint64_t segment_generation) : generation_(segment_generation) {}
  ~TenantRegions();
  TenantRegions(const TenantRegions&) = delete;
  TenantRegions& operator=(const TenantRegions&) = delete;

  // A fresh, zeroed and sealed region for entry `tenant` (< kMaxTenants), replacing the one
  // it had: processes that mapped the old one keep a mapping nobody reads any more. Throws
  // std::system_error.
  void create(uint32_t tenant);
  // Forgets entry `tenant`'s region (unmaps it and closes the descriptor).
  void drop(uint32_t tenant);
  // The region of entry `tenant`, or nullptr when it has none.
  shm::TenantRegion* get(uint32_t tenant) const {
    return tenant < shm::kMaxTenants ? entries_[tenant].region : nullptr;
  }
  // Its descriptor, to hand to a process; -1 when it has none.
  int fd(uint32_t tenant) const { return tenant < shm::kMaxTenants ? entries_[tenant].fd : -1; }

 private:
  struct Entry {
    int fd = -1;
    shm::TenantRegion* region = nullptr;
  };
  uint64_t generation_;
  std::array<Entry, shm::kMaxTenants> entries_{};
};

// Arithmetic on a word a tenant's processes can change at any time. Each gives up after a
// bounded number of compare-exchange attempts, so a process that keeps rewriting the word
// only spoils its own tenant's bookkeeping and never holds up the daemon.
void add_saturating(std::atomic<uint64_t>& word, uint64_t amount);
void sub_saturating(std::atomic<uint64_t>& word, uint64_t amount);

// Moves `seen` towards `reported` (a counter a tenant region holds, which should only grow),
// never backwards and by at most `bound`; returns how far it moved. What is left beyond the
// bound is taken at later calls, so an honest counter is followed exactly.
uint64_t advance(uint64_t& seen, uint64_t reported, uint64_t bound);

}  // namespace cuslice
