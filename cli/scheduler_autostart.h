// `cuslice run` with no scheduler answering: start cuslice-scheduler for the user.
//
// Where: on the last socket of the SocketChoice (scheduler_socket.h): the one --socket or
// $CUSLICE_SOCKET names; else, for root, the node's /run/cuslice/cuslice.sock; else the
// user's own socket in their private runtime directory (runtime_dir.h), with a segment name
// derived from that path, so that an ordinary user needs no set-up and never touches the
// node's socket or segment; random digits follow that name when another user holds it in
// /dev/shm already (made first, so that the daemon could not start).
//
// The scheduler is started detached (its own session, stdin/stdout closed, its log appended
// to <socket>.log) in ephemeral mode: no configuration file, tenants added by each
// `cuslice run` over its control socket (SocketChoice::control: for the user's own, in the
// private directory's sibling <dir>-control, created 0700 and checked as the directory is),
// exit once no process has been connected for
// kIdleGraceSeconds. Concurrent `cuslice run`s start one daemon between them: whoever
// holds the lock <socket>.lock starts it, the others find it answering. When it does not
// start, the error carries its exit status and what it logged in this attempt only.
//
// Where the program is: $CUSLICE_SCHEDULER_PATH, else cuslice-scheduler beside this
// program (installed: both in bin/), else ../scheduler/cuslice-scheduler (the build tree).
// $CUSLICE_AUTO_START=0 turns auto-start off: with nobody answering, `run` runs the
// command unscheduled (its memory quota, enforced by the hook, still holds).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "cli/scheduler_socket.h"

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

bool auto_start_enabled();

struct FoundScheduler {
  std::string socket;   // where it answers; with no connection, where it would be started
  std::string control;  // its control socket
  std::optional<SchedulerConnection> connection;  // to `socket`; nullopt: none answers, auto-start off
};

// A connection to the first scheduler of `choice` that answers; when none does, starts one
// first (see above) unless auto-start is off. Throws Error when the scheduler cannot be
// started, naming the cause.
FoundScheduler connect_or_start_scheduler(const SocketChoice& choice);

}  // namespace cuslice::cli
