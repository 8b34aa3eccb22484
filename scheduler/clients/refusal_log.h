// Refusals of a user's connections and requests, logged at most once per interval per uid
// with a count of those in between: a flood of refused requests costs the daemon a counter,
// not a log line each. Owns only that per-uid state; refuses nothing itself.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <unordered_map>

namespace cuslice {

class RefusalLog {
 public:
  static constexpr std::chrono::seconds kInterval{10};

  // Logs a refusal of `uid` for `why`, at most once per kInterval.
  void log(uid_t uid, const std::string& why);
  // The uid's last connection closed: its state goes unless refusals wait to be reported,
  // so that a later flood starts a new report.
  void forget_if_quiet(uid_t uid);

 private:
  struct State {
    int unlogged = 0;
    std::chrono::nanoseconds logged{0};
  };
  std::unordered_map<uid_t, State> per_uid_;
};

}  // namespace cuslice
