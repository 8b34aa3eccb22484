// A container's two Allocate calls (call_pairing.h).
#include "device_plugin/call_pairing.h"

namespace cuslice::device_plugin {

std::optional<std::string> CallPairing::memory_waiting(Clock::time_point now) const {
  if (last_ != Kind::kMemory || !waiting_ || !recent(now)) return std::nullopt;
  return tenant_;
}

std::optional<uint32_t> CallPairing::compute_waiting(Clock::time_point now) const {
  if (last_ != Kind::kCompute || !waiting_ || !recent(now)) return std::nullopt;
  return static_cast<uint32_t>(compute_ids_.size());
}

const std::vector<std::string>* CallPairing::last_compute(Clock::time_point now) const {
  return last_ == Kind::kCompute && recent(now) ? &compute_ids_ : nullptr;
}

void CallPairing::memory_call(const std::string& tenant, bool paired, Clock::time_point now) {
  last_ = Kind::kMemory;
  waiting_ = !paired;
  tenant_ = tenant;
  at_ = now;
}

void CallPairing::compute_call(const std::vector<std::string>& ids, bool paired, Clock::time_point now) {
  last_ = Kind::kCompute;
  waiting_ = !paired;
  compute_ids_ = ids;
  at_ = now;
}

}  // namespace cuslice::device_plugin
