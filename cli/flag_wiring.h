// The shapes of flag the subcommands share: a flag whose text a function checks, or rewrites
// (run_flags.h, cdi_spec.h, scheduler_socket.h: "" when good, else why not, which CLI11 shows
// as the parse error), and the --socket flags of those that talk to a scheduler.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "cli/scheduler_socket.h"

namespace cuslice::cli {

using FlagCheck = std::string (*)(std::string&);

// A flag `name` holding a `type` (as --help names it) whose text `check` accepts.
template <typename T>
CLI::Option* add_checked_flag(CLI::App& cmd, const std::string& name, T& value, const std::string& type,
                              const std::string& what, FlagCheck check) {
  return cmd.add_option(name, value, what)->type_name(type)->check(CLI::Validator(check, ""));
}

// A flag whose text `normalise` rewrites (or refuses) before it is stored.
template <typename T>
CLI::Option* add_normalised_flag(CLI::App& cmd, const std::string& name, T& value, const std::string& type,
                                 const std::string& what, FlagCheck normalise) {
  return cmd.add_option(name, value, what)->type_name(type)->transform(CLI::Validator(normalise, ""));
}

// What --socket says where a subcommand only reads from the scheduler.
inline constexpr const char* kSocketFlagHelp =
    "Scheduler socket (default: $CUSLICE_SOCKET, else /run/cuslice/cuslice.sock, else your own scheduler's)";

// --socket or --control-socket: a socket's path, made absolute.
inline CLI::Option* add_socket_flag(CLI::App& cmd, const std::string& name, std::optional<std::string>& path,
                                    const std::string& what) {
  return add_normalised_flag(cmd, name, path, "PATH", what, normalise_socket_flag);
}

}  // namespace cuslice::cli
