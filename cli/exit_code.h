// The exit statuses of `cuslice`, one table so that --help, docs/operations.md and the tests
// name the same numbers.
//
// `cuslice run` replaces itself with the command (execvp), so once the command has started the
// status is the command's own, or 128+N from the shell when a signal N killed it. The codes
// below are what cuslice itself returns before that point; 126 and 127 follow the shell's
// convention so that `cuslice run -- CMD` fails the way `CMD` alone would.
#pragma once

namespace cuslice::cli {

enum class ExitCode : int {
  kOk = 0,
  kFailure = 1,          // the request was valid but could not be carried out
  kUsage = 2,            // bad flags or arguments: nothing was done
  kConfigInvalid = 3,    // a configuration file was read and rejected
  kCannotExecute = 126,  // the command exists but could not be executed
  kNotFound = 127,       // the command was not found
};

constexpr int to_int(ExitCode code) { return static_cast<int>(code); }

}  // namespace cuslice::cli
