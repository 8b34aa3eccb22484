#include "scheduler/os/process_info.h"

#include <fstream>
#include <sstream>

namespace cuslice {

namespace {

// Field `n` (3 or later) of /proc/<pid>/stat as a number.
std::optional<uint64_t> stat_field(pid_t pid, int n) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return std::nullopt;
  // Field 2 (comm) is in parentheses and may itself contain spaces and ')': fields after it
  // are counted from the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= n; ++i) {
    if (!(rest >> field)) return std::nullopt;
  }
  try {
    return std::stoull(field);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

std::optional<uint64_t> process_start_time(pid_t pid) { return stat_field(pid, 22); }

std::optional<pid_t> process_parent(pid_t pid) {
  const std::optional<uint64_t> ppid = stat_field(pid, 4);
  return ppid ? std::optional<pid_t>(static_cast<pid_t>(*ppid)) : std::nullopt;
}

std::string process_cgroup(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "";
}

}  // namespace cuslice
