// `cuslice run [OPTIONS] -- CMD [ARGS...]`: runs CMD with the cuslice hook preloaded.
//
// cuslice does not stay around as a parent: it sets the environment the hook and the
// scheduler read, then execvp()s CMD, so signals, the exit status and the process id are
// CMD's own, exactly as if it had been started directly.
//
// Before that it makes sure a scheduler answers (scheduler_autostart.h): when none does it
// starts an ephemeral one; when the one answering is ephemeral it adds CMD's tenant (named
// by --tenant, else "default", with --memory/--share/--limit/--priority) and hands CMD the
// connection as its lease, so the daemon lives while CMD (or a child of it) does. A
// scheduler started from a file keeps its own tenants: the flags then only set the
// variables below.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "error.h"
#include "hook_locator.h"
#include "ppm.h"
#include "preload.h"
#include "scheduler_autostart.h"
#include "scheduler_socket.h"
#include "size.h"
#include "socket_protocol.h"

namespace cuslice::cli {
namespace {

// What the hook reads (hook/), what the scheduler reads (scheduler/), what CUDA reads.
constexpr const char* kMemoryLimitEnv = "CUSLICE_MEMORY_LIMIT";
constexpr const char* kLogLevelEnv = "CUSLICE_LOG_LEVEL";
constexpr const char* kShareEnv = "CUSLICE_SHARE";
constexpr const char* kComputeLimitEnv = "CUSLICE_COMPUTE_LIMIT";
constexpr const char* kPriorityEnv = "CUSLICE_PRIORITY";
constexpr const char* kVisibleDevicesEnv = "CUDA_VISIBLE_DEVICES";

constexpr const char* kSchedulingGroup = "Scheduling (cuslice-scheduler is started if none runs)";
constexpr const char* kDefaultTenant = "default";

struct RunOptions {
  std::optional<std::string> memory;
  std::optional<std::string> tenant;
  std::optional<std::string> share;  // normalised to "<number>%"
  std::optional<std::string> limit;  // normalised to "<number>%"
  std::optional<std::string> priority;
  std::optional<std::string> gpus;
  std::optional<std::string> log_level;
  std::optional<std::filesystem::path> hook;
  std::optional<std::string> socket;
  std::vector<std::string> command;
};

// Validators return an empty string when the value is good, else why it is not (CLI11 turns
// that into a usage error naming the option).

// The hook parses CUSLICE_MEMORY_LIMIT with the same function at startup, where it can only
// log a bad value; checking here turns a typo into a usage error before anything runs.
std::string check_memory(std::string& text) {
  SizeSpec spec;
  const char* why = nullptr;
  if (!parse_size(text, spec, &why))
    return fmt::format("\"{}\" is not a memory size: {} (for example 4GiB, 4096MiB or 25%)", text,
                       why);
  return {};
}

// Compute shares are written like memory percentages ("60%", as in the tenant YAML); a bare
// number is refused rather than guessed at, since the size parser would read it as bytes.
std::string normalise_percent(std::string& text) {
  SizeSpec spec;
  const char* why = nullptr;
  if (!parse_size(text, spec, &why) || spec.kind != SizeSpec::Kind::kPercent)
    return fmt::format(
        "\"{}\" is not a percentage: write it as above 0% and at most 100%, e.g. 60%", text);
  text = fmt::format("{}%", spec.percent);
  return {};
}

double percent_value(const std::string& normalised) {
  SizeSpec spec;
  parse_size(normalised, spec, nullptr);
  return spec.percent;
}

std::string check_tenant(std::string& name) {
  if (name.empty()) return "a tenant name cannot be empty";
  for (const char c : name)
    if (c <= ' ' || c == 0x7f) return "a tenant name cannot contain spaces or control characters";
  return {};
}

// CUDA_VISIBLE_DEVICES: indices or GPU-/MIG- UUIDs separated by commas.
std::string check_gpus(std::string& list) {
  if (list.empty()) return "the GPU list is empty: give indices or UUIDs, e.g. 0,1 or GPU-<uuid>";
  size_t start = 0;
  for (;;) {
    const size_t comma = list.find(',', start);
    const std::string item = list.substr(start, comma == std::string::npos ? comma : comma - start);
    if (item.empty())
      return fmt::format("\"{}\" has an empty entry: separate GPUs with single commas", list);
    for (const char c : item)
      if (c <= ' ' || c == 0x7f)
        return fmt::format("\"{}\" contains a space or control character", list);
    if (comma == std::string::npos) return {};
    start = comma + 1;
  }
}

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

// The tenant an ephemeral scheduler should hold for this command.
wire::TenantSpec tenant_spec(const RunOptions& options) {
  wire::TenantSpec spec;
  const std::string name = options.tenant.value_or(kDefaultTenant);
  std::strncpy(spec.name, name.c_str(), sizeof spec.name - 1);
  if (name.size() >= sizeof spec.name)
    throw Error(ExitCode::kUsage, fmt::format("tenant name \"{}\" is longer than {} characters", name, sizeof spec.name - 1));
  if (options.priority) spec.priority = *options.priority == "high" ? 2 : *options.priority == "low" ? 0 : 1;
  if (options.share) spec.share_ppm = percent_to_ppm(percent_value(*options.share));
  if (options.limit) spec.limit_ppm = percent_to_ppm(percent_value(*options.limit));
  if (options.memory) {
    SizeSpec size;
    parse_size(*options.memory, size, nullptr);
    if (size.kind == SizeSpec::Kind::kPercent) spec.memory_ppm = percent_to_ppm(size.percent);
    else spec.memory_bytes = size.bytes;
  }
  return spec;
}

// Makes sure the command has a scheduler (see the top of this file) and sets what the hook
// needs to join it.
void join_scheduler(const RunOptions& options) {
  const std::string socket = resolve_socket_path(options.socket);
  std::optional<SchedulerConnection> connection = connect_or_start_scheduler(socket);
  if (options.socket) set_env(wire::kSocketEnv, socket);
  if (!connection) return;  // auto-start is off and nobody answers: unscheduled

  wire::ControlRequest request;
  request.command = wire::ControlCommand::kEnsureTenant;
  request.tenant = tenant_spec(options);
  const wire::ControlReply reply = connection->request(request);
  switch (reply.status) {
    case wire::ControlStatus::kOk:
      // The descriptor stays open in the command, unnamed: the daemon only needs it open.
      connection->release_as_lease();
      set_env(wire::kSocketEnv, socket);
      set_env(wire::kTenantEnv, request.tenant.name);
      return;
    case wire::ControlStatus::kUnsupported:
      return;  // a scheduler with a configuration file: its tenants, its match rules
    default:
      throw Error(ExitCode::kFailure, fmt::format("the scheduler on {} refused the tenant: {}", socket, reply.message),
                  "see `cuslice status` for the tenants it runs");
  }
}

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
  set_env_if(kShareEnv, options.share);
  set_env_if(kComputeLimitEnv, options.limit);
  set_env_if(kPriorityEnv, options.priority);
  set_env_if(kVisibleDevicesEnv, options.gpus);

  exec_command(options.command);
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
           "  cuslice run --tenant inference --gpus 0 -- ./serve\n";
  });

  cmd->add_option("--memory", options->memory,
                  "GPU memory quota for the command: 4GiB, 4096MiB, 1.5GB or 25% of the device "
                  "(sets CUSLICE_MEMORY_LIMIT)")
      ->type_name("SIZE")
      ->check(CLI::Validator(check_memory, ""));
  cmd->add_option("--tenant", options->tenant,
                  "Tenant to run as (sets CUSLICE_TENANT): one of the scheduler's configuration, or, "
                  "with an auto-started scheduler, a new one (default: \"default\")")
      ->type_name("NAME")
      ->check(CLI::Validator(check_tenant, ""));
  cmd->add_option("--gpus", options->gpus,
                  "GPUs the command may see: indices or UUIDs, comma-separated "
                  "(sets CUDA_VISIBLE_DEVICES)")
      ->type_name("LIST")
      ->check(CLI::Validator(check_gpus, ""));
  cmd->add_option("--log-level", options->log_level,
                  "How much the hook logs on stderr (sets CUSLICE_LOG_LEVEL; default: error)")
      ->type_name("LEVEL")
      ->check(CLI::IsMember({"off", "error", "warn", "info", "debug"}));
  cmd->add_option("--hook", options->hook,
                  "libcuslice.so to preload (default: $CUSLICE_HOOK_PATH, then ../lib and ../hook "
                  "beside this program)")
      ->type_name("PATH");

  cmd->add_option("--socket", options->socket,
                  "Scheduler socket (sets CUSLICE_SOCKET; default: $CUSLICE_SOCKET, then "
                  "/run/cuslice/cuslice.sock)")
      ->type_name("PATH")
      ->group(kSchedulingGroup);
  cmd->add_option(
         "--share", options->share,
         "Compute share guaranteed when the GPU is contended, e.g. 60% (sets CUSLICE_SHARE)")
      ->type_name("PCT")
      ->transform(CLI::Validator(normalise_percent, ""))
      ->group(kSchedulingGroup);
  cmd->add_option("--limit", options->limit,
                  "Most compute the command may use even when the GPU is idle, e.g. 80% "
                  "(sets CUSLICE_COMPUTE_LIMIT)")
      ->type_name("PCT")
      ->transform(CLI::Validator(normalise_percent, ""))
      ->group(kSchedulingGroup);
  cmd->add_option("--priority", options->priority,
                  "Scheduling priority: high, normal or low (sets CUSLICE_PRIORITY)")
      ->type_name("P")
      ->check(CLI::IsMember({"high", "normal", "low"}))
      ->group(kSchedulingGroup);

  cmd->add_option("CMD", options->command, "The command to run and its arguments")
      ->type_name("")
      ->required();

  cmd->callback([options, &chosen] { chosen = [options] { return run(*options); }; });
}

}  // namespace cuslice::cli
