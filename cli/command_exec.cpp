// Setting the command's environment and becoming it (command_exec.h).
#include "cli/command_exec.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "cli/error.h"

namespace cuslice::cli {

void set_env(const char* name, const std::string& value) {
  if (::setenv(name, value.c_str(), 1) != 0)
    throw Error(ExitCode::kFailure, fmt::format("cannot set {}: {}", name, std::strerror(errno)));
}

void set_env_if(const char* name, const std::optional<std::string>& value) {
  if (value) set_env(name, *value);
}

[[noreturn]] void exec_command(std::vector<std::string>& command) {
  std::vector<char*> argv;
  argv.reserve(command.size() + 1);
  for (std::string& arg : command) argv.push_back(arg.data());
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());

  const int err = errno;
  const std::string& name = command.front();
  const bool has_slash = name.find('/') != std::string::npos;
  if (err == ENOENT)
    throw Error(ExitCode::kNotFound, fmt::format("{}: command not found", name),
                has_slash ? "check the path (a script's #! interpreter must exist too)"
                          : "check the spelling, or add the command's directory to PATH");
  throw Error(
      ExitCode::kCannotExecute, fmt::format("cannot execute {}: {}", name, std::strerror(err)),
      err == EACCES ? "check that the file is executable and its filesystem not noexec" : "");
}

}  // namespace cuslice::cli
