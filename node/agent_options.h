// The command-line options the Kubernetes node agents (cuslice-device-plugin,
// cuslice-dra-plugin) share, spelt and explained once: where the scheduler's sockets, segment,
// hook and device nodes are, the preload file, a size in bytes, and the log.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "common/container_edits.h"

namespace cuslice::node {

// --scheduler-socket, --scheduler-control-socket, --hook (required), --preload-file,
// --shm-name, --dev-root. settle_scheduler_paths() and provide_hook() check them after parsing.
void add_scheduler_options(CLI::App& app, MountOptions& mounts, std::string& scheduler_socket,
                           std::string& control_socket, std::string& preload_file);

// --log-level and --log-target.
void add_log_options(CLI::App& app, std::string& level, std::string& target);

// `text` (an option's value, e.g. "2GiB") in bytes; false with `why` naming `option`.
bool bytes_of_option(const char* option, const std::string& text, uint64_t& bytes, std::string& why);

}  // namespace cuslice::node
