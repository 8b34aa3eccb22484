// Becoming the command: the environment it inherits, then execvp(). cuslice does not stay as
// a parent, so signals, the exit status and the process id are the command's own, exactly as
// if it had been started directly.
//
// Sets what it is told to; which variables a run sets, and why, is run_command.cpp's and
// scheduler_join.cpp's.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace cuslice::cli {

// Throws Error (kFailure) when the variable cannot be set.
void set_env(const char* name, const std::string& value);
void set_env_if(const char* name, const std::optional<std::string>& value);

// Runs `command` (searched in PATH) in place of this process. Throws Error when it cannot,
// with the status a shell gives: kNotFound (127), kCannotExecute (126).
[[noreturn]] void exec_command(std::vector<std::string>& command);

}  // namespace cuslice::cli
