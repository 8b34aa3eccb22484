// `cuslice run [OPTIONS] -- CMD [ARGS...]`: runs CMD with the cuslice hook preloaded.
//
// cuslice does not stay around as a parent: it sets the environment the hook reads, then
// execvp()s CMD (command_exec.h), so signals, the exit status and the process id are CMD's
// own, exactly as if it had been started directly. Before that it makes sure a scheduler
// answers and will take CMD as its tenant (scheduler_join.h). --memory is always the
// processes' own quota (CUSLICE_MEMORY_LIMIT), which the hook enforces with or without a
// scheduler.
//
// This file holds the subcommand's flags and the order of a run's steps; the flags' checks
// are run_flags.h's, and nothing here talks to a scheduler itself.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/command_exec.h"
#include "cli/commands.h"
#include "cli/error.h"
#include "cli/flag_wiring.h"
#include "cli/hook_locator.h"
#include "cli/preload.h"
#include "cli/run_flags.h"
#include "cli/run_options.h"
#include "cli/scheduler_join.h"
#include "cli/scheduler_socket.h"
#include "protocol/socket_protocol.h"

namespace cuslice::cli {
namespace {

// What the hook reads (hook/base/settings.h) and what CUDA reads.
constexpr const char* kMemoryLimitEnv = "CUSLICE_MEMORY_LIMIT";
constexpr const char* kLogLevelEnv = "CUSLICE_LOG_LEVEL";
constexpr const char* kVisibleDevicesEnv = "CUDA_VISIBLE_DEVICES";

constexpr const char* kSchedulingGroup = "Scheduling (cuslice-scheduler is started if none runs)";

int run(RunOptions& options) {
  if (options.share && options.limit &&
      percent_value(*options.limit) < percent_value(*options.share))
    throw Error(
        ExitCode::kUsage,
        fmt::format("--limit {} is below --share {}: the limit caps what the share guarantees",
                    *options.limit, *options.share),
        "raise --limit or lower --share");

  const std::filesystem::path hook =
      locate_hook(hook_search_from_environment(options.hook, "--hook"));
  join_scheduler(options);
  const char* preload = std::getenv("LD_PRELOAD");
  set_env("LD_PRELOAD", append_hook_to_preload(preload != nullptr ? preload : "", hook));

  set_env_if(kMemoryLimitEnv, options.memory);
  set_env_if(kLogLevelEnv, options.log_level);
  set_env_if(wire::kTenantEnv, options.tenant);
  set_env_if(kVisibleDevicesEnv, options.gpus);

  exec_command(options.command);
}

// --memory, --tenant, --gpus, --log-level and --hook: what the command's processes get.
void add_process_flags(CLI::App& cmd, RunOptions& options) {
  add_checked_flag(cmd, "--memory", options.memory, "SIZE",
                   "GPU memory quota of each of the command's processes, per GPU: 4GiB, 4Gi, 4096MiB, "
                   "4G (4*10^9 bytes) or 25% of the card (sets CUSLICE_MEMORY_LIMIT); with an "
                   "auto-started scheduler also the tenant's quota",
                   check_memory);
  add_checked_flag(cmd, "--tenant", options.tenant, "NAME",
                   "Tenant to run as (sets CUSLICE_TENANT): with an auto-started scheduler, one shared "
                   "by every run that names it; with a configured scheduler, one of its file's. Default: "
                   "a new tenant of the command's own, named after it and its pid (python3-4242); with a "
                   "configured scheduler, the file's match rules and default_tenant",
                   check_tenant);
  add_checked_flag(cmd, "--gpus", options.gpus, "LIST",
                   "GPUs the command may see: indices or GPU-/MIG- UUIDs, comma-separated "
                   "(sets CUDA_VISIBLE_DEVICES)",
                   check_gpus);
  cmd.add_option("--log-level", options.log_level,
                 "How much the hook logs on stderr: off, error, warn, info or debug (sets "
                 "CUSLICE_LOG_LEVEL; default: error)")
      ->type_name("LEVEL")
      ->check(CLI::IsMember({"off", "error", "warn", "info", "debug"}));
  cmd.add_option("--hook", options.hook,
                 "libcuslice.so to preload (default: $CUSLICE_HOOK_PATH, then ../lib and ../hook "
                 "beside this program)")
      ->type_name("PATH");
}

// --socket, --control-socket, --share, --limit and --priority: which scheduler, and what the
// tenant gets there.
void add_scheduling_flags(CLI::App& cmd, RunOptions& options) {
  add_socket_flag(cmd, "--socket", options.socket,
                  "Scheduler socket (sets CUSLICE_SOCKET; default: $CUSLICE_SOCKET, else "
                  "/run/cuslice/cuslice.sock, else your own scheduler's in $XDG_RUNTIME_DIR/cuslice "
                  "or /tmp/cuslice-UID)")
      ->group(kSchedulingGroup);
  add_socket_flag(cmd, "--control-socket", options.control_socket,
                  "The scheduler's control socket, where an auto-started scheduler takes the tenant "
                  "(sets CUSLICE_CONTROL_SOCKET; default: $CUSLICE_CONTROL_SOCKET, else the socket's name in "
                  "<socket's directory>-control)")
      ->group(kSchedulingGroup);
  add_normalised_flag(cmd, "--share", options.share, "PCT",
                      "Compute share guaranteed when the GPU is contended, e.g. 60%: the new tenant's, "
                      "or checked against a configured scheduler's --tenant",
                      normalise_percent)
      ->group(kSchedulingGroup);
  add_normalised_flag(cmd, "--limit", options.limit, "PCT",
                      "Most compute the tenant may use even when the GPU is idle, e.g. 80% (as --share)",
                      normalise_percent)
      ->group(kSchedulingGroup);
  cmd.add_option("--priority", options.priority, "Scheduling priority: high, normal or low (as --share)")
      ->type_name("P")
      ->check(CLI::IsMember({"high", "normal", "low"}))
      ->group(kSchedulingGroup);
}

}  // namespace

void add_run_command(CLI::App& root, Action& chosen) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* cmd =
      root.add_subcommand("run", "Run a command with the cuslice hook appended to LD_PRELOAD");
  // A callback footer is printed before the exit statuses this subcommand inherits from root.
  cmd->footer([] {
    return "Put the command after '--' so that its own options are not read as cuslice's:\n"
           "  cuslice run --memory 8GiB -- python train.py --epochs 3\n"
           "  cuslice run --tenant inference --gpus 0 -- ./serve\n"
           "A user other than root needs no set-up: with no scheduler at /run/cuslice, `run`\n"
           "starts one of the user's own in $XDG_RUNTIME_DIR/cuslice (else /tmp/cuslice-UID).\n";
  });
  add_process_flags(*cmd, *options);
  add_scheduling_flags(*cmd, *options);
  cmd->add_option("CMD", options->command, "The command to run and its arguments")
      ->type_name("")
      ->required();

  cmd->callback([options, &chosen] { chosen = [options] { return run(*options); }; });
}

}  // namespace cuslice::cli
