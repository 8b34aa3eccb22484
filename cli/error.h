// How a command tells its user that it failed.
//
// Command code throws `Error`; main() catches it once, prints it and exits with its code.
// The message says what failed and why ("cannot write /etc/cdi/cuslice.json: Permission
// denied"); the hint, when there is one, says what to do next. Both go to stderr so that a
// command's stdout (a CDI spec, a version string) stays machine-readable.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "protocol/exit_codes.h"

namespace cuslice::cli {

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& message, std::string hint = {})
      : std::runtime_error(message), code_(code), hint_(std::move(hint)) {}

  ExitCode code() const noexcept { return code_; }
  const std::string& hint() const noexcept { return hint_; }

 private:
  ExitCode code_;
  std::string hint_;
};

// Writes "<command>: <message>" and, if `hint` is not empty, an indented hint line to stderr.
// `command` is the full command path, e.g. "cuslice cdi generate".
void print_error(std::string_view command, std::string_view message, std::string_view hint);

}  // namespace cuslice::cli
