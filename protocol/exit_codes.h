// The exit statuses of cuslice's programs: one table for `cuslice`, `cuslice-scheduler` and
// the documentation (docs/reference/cli.md), so that scripts, systemd units and people read the same
// numbers everywhere.
//
// The hook never exits: it runs inside the user's application. Its fatal outcome (a
// CUSLICE_* variable it cannot read, or a scheduler with no tenant for the process) is one
// line on stderr and CUDA initialisation failing with CUDA_ERROR_NOT_INITIALIZED, which the
// application reports in its own way.
//
// `cuslice run` replaces itself with the command (execvp): once the command has started the
// status is the command's own, or 128+N from the shell when signal N ended it. 126 and 127
// follow the shell's convention so that `cuslice run -- CMD` fails the way `CMD` would.
#pragma once

namespace cuslice {

enum class ExitCode : int {
  kOk = 0,
  kFailure = 1,          // the request was valid but could not be carried out
  kUsage = 2,            // bad flags or arguments, or flags the running scheduler cannot
                         // honour: nothing was done
  kConfigInvalid = 3,    // a configuration file was read and rejected
  kNoScheduler = 4,      // no scheduler answers (and none left a segment to read)
  kCannotExecute = 126,  // the command exists but could not be executed
  kNotFound = 127,       // the command was not found
};

constexpr int to_int(ExitCode code) { return static_cast<int>(code); }

struct ExitCodeDoc {
  ExitCode code;
  const char* meaning;
};

// What each status means, in the words --help and docs/reference/cli.md use.
inline constexpr ExitCodeDoc kExitCodeDocs[] = {
    {ExitCode::kOk, "success"},
    {ExitCode::kFailure, "failure: the request was valid but could not be carried out"},
    {ExitCode::kUsage, "usage error: a bad flag or argument, or a flag the running scheduler cannot honour; "
                       "nothing was done"},
    {ExitCode::kConfigInvalid, "configuration invalid"},
    {ExitCode::kNoScheduler, "no scheduler answers (cuslice status, cuslice reload)"},
    {ExitCode::kCannotExecute, "cuslice run: the command was found but could not be executed"},
    {ExitCode::kNotFound, "cuslice run: the command was not found"},
};

}  // namespace cuslice
