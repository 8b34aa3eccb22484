// RefusalLog (refusal_log.h).
#include "scheduler/clients/refusal_log.h"

#include <spdlog/spdlog.h>

#include "protocol/clock.h"

namespace cuslice {

void RefusalLog::log(uid_t uid, const std::string& why) {
  State& s = per_uid_[uid];
  const std::chrono::nanoseconds now{now_ns()};
  if (s.logged.count() != 0 && now - s.logged < kInterval) {
    ++s.unlogged;
    return;
  }
  if (s.unlogged > 0) {
    spdlog::warn("uid {}: {} ({} more refusals since the last report)", uid, why, s.unlogged);
  } else {
    spdlog::warn("uid {}: {}", uid, why);
  }
  s.unlogged = 0;
  s.logged = now;
}

void RefusalLog::forget_if_quiet(uid_t uid) {
  auto it = per_uid_.find(uid);
  if (it != per_uid_.end() && it->second.unlogged == 0) per_uid_.erase(it);
}

}  // namespace cuslice
