// `cuslice run` with nobody answering on the socket: start cuslice-scheduler for the user.
//
// The scheduler is started detached (its own session, stdin/stdout closed, its log appended
// to <socket>.log) in ephemeral mode: no configuration file, tenants added by each
// `cuslice run` over the socket, exit once no process has been connected for
// kIdleGraceSeconds. Concurrent `cuslice run`s start one daemon between them: whoever
// holds the lock <socket>.lock starts it, the others find it answering.
//
// Where the program is: $CUSLICE_SCHEDULER_PATH, else cuslice-scheduler beside this
// program (installed: both in bin/), else ../scheduler/cuslice-scheduler (the build tree).
// $CUSLICE_AUTO_START=0 turns auto-start off: with nobody answering, `run` runs the
// command unscheduled (its memory quota, enforced by the hook, still holds).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "scheduler_socket.h"

namespace cuslice::cli {

inline constexpr const char* kSchedulerPathEnv = "CUSLICE_SCHEDULER_PATH";
inline constexpr const char* kAutoStartEnv = "CUSLICE_AUTO_START";
inline constexpr double kIdleGraceSeconds = 2.0;

// The segment name a scheduler on `socket_path` uses unless told otherwise: the default
// name on the default socket, else one derived from the socket path, so that a private
// scheduler never replaces the node's segment and `cuslice status --socket P` finds it.
std::string shm_name_for_socket(const std::string& socket_path);

// Throws Error (kFailure) when there is none.
std::filesystem::path locate_scheduler();

// A connection to the scheduler answering on `socket_path`; when nobody answers, starts
// one first unless auto-start is off ($CUSLICE_AUTO_START=0), in which case nullopt.
// Throws Error when the scheduler cannot be started, with its last log lines.
std::optional<SchedulerConnection> connect_or_start_scheduler(const std::string& socket_path);

}  // namespace cuslice::cli
