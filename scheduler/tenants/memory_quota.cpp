// The segment's form of a tenant's memory quota (memory_quota.h).
#include "scheduler/tenants/memory_quota.h"

#include "protocol/ppm.h"

namespace cuslice {

MemoryQuota memory_quota(const std::optional<SizeSpec>& memory, std::optional<uint64_t> gpu_memory) {
  MemoryQuota q;
  if (!memory) return q;
  if (memory->kind == SizeSpec::Kind::kBytes) {
    q.bytes = memory->bytes;
  } else if (gpu_memory) {
    q.bytes = memory->resolve(*gpu_memory);
  } else {
    q.ppm = percent_to_ppm(memory->percent);
  }
  return q;
}

}  // namespace cuslice
