// A tenant's memory quota as the daemon writes it into the segment (shm::Tenant's
// memory_quota and memory_quota_ppm): bytes when the bytes are known, else the percentage
// as ppm for each hook to resolve against its own card. Pure: no I/O, no segment access.
#pragma once

#include <cstdint>
#include <optional>

#include "config/size.h"
#include "protocol/shm_protocol.h"

namespace cuslice {

struct MemoryQuota {
  uint64_t bytes = shm::kUnlimited;  // kUnlimited: none in bytes (see ppm)
  uint32_t ppm = 0;                  // 0: not a fraction of the card
};

// `memory` as configured (absent: no quota); `gpu_memory` is scheduler.gpu_memory, the
// card's size when the configuration states it. Both resolutions go through ppm.h, so a
// percentage is the same bytes whether resolved here or by the hook.
MemoryQuota memory_quota(const std::optional<SizeSpec>& memory, std::optional<uint64_t> gpu_memory);

}  // namespace cuslice
