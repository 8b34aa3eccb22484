// What /proc says about a process: its start time (to tell it from a later process with the
// same pid) and its cgroup (for match rules).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace cuslice {

// Field 22 of /proc/<pid>/stat: start time in clock ticks after boot.
std::optional<uint64_t> process_start_time(pid_t pid);

// Field 4 of /proc/<pid>/stat: the parent's pid.
std::optional<pid_t> process_parent(pid_t pid);

// The cgroup v2 path from /proc/<pid>/cgroup ("0::/path"), or "" when there is none.
std::string process_cgroup(pid_t pid);

}  // namespace cuslice
