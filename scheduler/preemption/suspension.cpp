// Suspension (suspension.h): the lists a job is made of, and the bytes that stay suspended.
#include "scheduler/preemption/suspension.h"

#include <algorithm>

#include "protocol/shm_protocol.h"

namespace cuslice {

Suspension Suspension::held_by_hooks() const {
  Suspension rest;
  rest.hooks_hold = true;
  rest.fast_gpu = fast_gpu;
  rest.moved_out = moved_out;
  rest.suspended_since = suspended_since;
  rest.suspended_ns_before = suspended_ns_before;
  return rest;
}

std::vector<SuspendProcess> Suspension::job_processes() const {
  std::vector<SuspendProcess> out;
  for (const Process& p : processes)
    if (!p.stop) out.push_back({p.pid, p.start_time});
  return out;
}

std::vector<SuspendProcess> Suspension::stop_processes() const {
  std::vector<SuspendProcess> out;
  for (const Process& p : processes)
    if (p.stop) out.push_back({p.pid, p.start_time});
  return out;
}

void Suspension::drop(const std::function<bool(const Process&)>& which) {
  std::erase_if(processes, which);
  bytes.assign(shm::kMaxGpus, 0);
  for (const Process& p : processes)
    for (uint32_t g = 0; g < shm::kMaxGpus && g < p.bytes.size(); ++g) bytes[g] += p.bytes[g];
}

uint64_t Suspension::total() const {
  uint64_t sum = 0;
  for (uint64_t b : bytes) sum += b;
  return sum;
}

}  // namespace cuslice
