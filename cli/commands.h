// The subcommands of `cuslice`, and how to add one.
//
// To add a subcommand:
//   1. Write cli/<name>_command.cpp defining `void add_<name>_command(CLI::App& root,
//      Action& chosen)`. It adds the subcommand and its options to `root` and gives the
//      subcommand a callback that stores, in `chosen`, what to do.
//   2. Declare the function below, add it to kCommands (the order is that of --help) and add
//      the file to cli/CMakeLists.txt.
// A group such as `cuslice cdi generate` is one file adding the group and its members.
//
// main() parses the whole command line before running `chosen`, so an action never starts
// on half-validated flags, and a parse error (exit 2) has had no side effect.
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace cuslice::cli {

// What the chosen subcommand does once parsing has succeeded. Returns the exit status, or
// throws Error. `cuslice run` does not return when it succeeds: it becomes the command.
using Action = std::function<int()>;
using AddCommand = void (*)(CLI::App& root, Action& chosen);

void add_run_command(CLI::App& root, Action& chosen);
void add_status_command(CLI::App& root, Action& chosen);
void add_reload_command(CLI::App& root, Action& chosen);
void add_config_command(CLI::App& root, Action& chosen);
void add_cdi_command(CLI::App& root, Action& chosen);
void add_version_command(CLI::App& root, Action& chosen);

inline constexpr AddCommand kCommands[] = {
    add_run_command,
    add_status_command,
    add_reload_command,
    add_config_command,
    add_cdi_command,
    add_version_command,
};

}  // namespace cuslice::cli
