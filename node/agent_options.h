// The command-line options the Kubernetes node agents (cuslice-device-plugin,
// cuslice-dra-plugin) share, spelt and explained once: where the scheduler's sockets, segment,
// hook and device nodes are, the preload file, a size in bytes, a time in seconds, and the log.
#pragma once

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/container_edits.h"

namespace cuslice::node {

// --scheduler-socket, --scheduler-control-socket, --hook (required), --preload-file,
// --shm-name, --dev-root. finish_scheduler_options() checks them after parsing.
void add_scheduler_options(CLI::App& app, MountOptions& mounts, std::string& scheduler_socket,
                           std::string& control_socket, std::string& preload_file);

// After parsing: settle_scheduler_paths(), then provide_hook() (common/container_edits.h).
// 0, or the exit status, the reason logged.
int finish_scheduler_options(const CLI::App& app, MountOptions& mounts, const std::string& scheduler_socket,
                             std::string& control_socket, const std::string& preload_file);

struct LogOptions {
  std::string level = "info";
  std::string target = "stderr";
};

// --log-level and --log-target.
void add_log_options(CLI::App& app, LogOptions& log);
// Sends the program's log where `log` says, from its level up (common/logging.h).
void start_logging(const LogOptions& log);

// Parses the command line into the options added to `app`, starts the log as `log` (one of
// them) says, then checks the options with `finish` (0, or an exit status). nullopt to go on,
// else the exit status: 0 after --help, CLI11's after a parse error, or `finish`'s.
std::optional<int> start_agent(CLI::App& app, int argc, char** argv, const LogOptions& log,
                               const std::function<int()>& finish);

// `text` (an option's value, e.g. "2GiB") in bytes; false with `why` naming `option`.
bool bytes_of_option(const char* option, const std::string& text, uint64_t& bytes, std::string& why);

// An option in seconds, from `min` to `max`, its default shown.
CLI::Option* add_seconds_option(CLI::App& app, const std::string& name, double& seconds, const std::string& what,
                                double min, double max);
// Seconds as given on the command line, to the millisecond.
std::chrono::milliseconds milliseconds_of(double seconds);

}  // namespace cuslice::node
