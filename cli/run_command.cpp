// `cuslice run [OPTIONS] -- CMD [ARGS...]`: runs CMD with the cuslice hook preloaded.
//
// cuslice does not stay around as a parent: it sets the environment the hook reads, then
// execvp()s CMD, so signals, the exit status and the process id are CMD's own, exactly as
// if it had been started directly.
//
// Before that it makes sure a scheduler answers (scheduler_autostart.h): the node's, else
// the user's own, which it starts when none answers, and asks it (on the tenant socket)
// what it is. When it is ephemeral, `run` adds CMD's tenant (named by --tenant, else
// "default", with --memory/--share/--limit/--priority) on the scheduler's control socket,
// which only root and the scheduler's user reach, and hands CMD that connection as its
// lease, so the daemon lives while CMD (or a child of it) does. A scheduler started from a file keeps its own tenants: --share,
// --limit and --priority are then accepted only when they say what the file says for
// --tenant, and refused otherwise, never silently dropped; the same flags are refused when
// no scheduler will run at all (auto-start off). --memory is always the processes' own
// quota (CUSLICE_MEMORY_LIMIT), which the hook enforces with or without a scheduler.
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
#include "segment_mapping.h"
#include "segment_snapshot.h"
#include "control_socket.h"
#include "size.h"
#include "socket_protocol.h"
#include "tenant_config.h"

namespace cuslice::cli {
namespace {

// What the hook reads (hook/settings.h) and what CUDA reads.
constexpr const char* kMemoryLimitEnv = "CUSLICE_MEMORY_LIMIT";
constexpr const char* kLogLevelEnv = "CUSLICE_LOG_LEVEL";
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
  std::optional<std::string> control_socket;
  std::vector<std::string> command;
};

// Validators return an empty string when the value is good, else why it is not; CLI11 puts
// the flag in front ("--gpus: ...") and main() makes it a usage error (exit 2).

// The hook parses CUSLICE_MEMORY_LIMIT with the same function at startup, where it can only
// refuse CUDA; checking here turns a typo into a usage error before anything runs. On the
// command line a unit is required: `--memory 4` is 4 bytes to the hook, never what was meant.
std::string check_memory(std::string& text) {
  SizeSpec spec;
  const char* why = nullptr;
  if (!parse_size(text, spec, &why)) return fmt::format("\"{}\" is not a memory size: {}", text, why);
  if (spec.kind == SizeSpec::Kind::kBytes && spec.bytes == 0) return fmt::format("\"{}\": a quota must be above zero", text);
  return {};
}

// Compute shares are written like the tenant YAML's ("60%"); normalised to "<number>%".
std::string normalise_percent(std::string& text) {
  double percent = 0;
  const char* why = nullptr;
  if (!parse_percent(text, percent, &why)) return fmt::format("\"{}\" is not a percentage: {}", text, why);
  text = fmt::format("{}%", percent);
  return {};
}

double percent_value(const std::string& normalised) {
  double percent = 0;
  parse_percent(normalised, percent, nullptr);
  return percent;
}

// The configuration's rule, so that a name `run` accepts is one a file could hold too.
std::string check_tenant(std::string& name) {
  if (valid_tenant_name(name)) return {};
  return fmt::format("\"{}\" is not a tenant name: 1 to {} letters, digits, '-', '_' or '.'", name,
                     kMaxTenantNameLength);
}

bool all_digits(std::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
}

// CUDA_VISIBLE_DEVICES: indices, GPU-<uuid> or MIG-<uuid> (a unique prefix is enough for
// CUDA), separated by commas. Anything else CUDA would ignore without a word, hiding GPUs.
std::string check_gpus(std::string& list) {
  constexpr const char* kForms = "write indices or UUIDs separated by commas, e.g. 0,1 or GPU-8f6b0c1e or MIG-5c4a...";
  if (list.empty()) return fmt::format("the GPU list is empty; {}", kForms);
  size_t start = 0;
  for (;;) {
    const size_t comma = list.find(',', start);
    const std::string_view item = std::string_view(list).substr(start, comma == std::string::npos ? comma : comma - start);
    if (item.empty()) return fmt::format("\"{}\" has an empty entry; {}", list, kForms);
    std::string_view id = item;
    if (id.starts_with("MIG-")) id.remove_prefix(4);
    if (id.starts_with("GPU-")) id.remove_prefix(4);  // GPU-<uuid>, and MIG-GPU-<uuid>/<gi>/<ci> of old drivers
    const bool uuid = id.size() < item.size() && !id.empty() &&
                      id.find_first_not_of("0123456789abcdefABCDEF-/") == std::string_view::npos;
    if (!all_digits(item) && !uuid)
      return item.size() == list.size() ? fmt::format("\"{}\" is not a GPU index or UUID; {}", item, kForms)
                                        : fmt::format("\"{}\" in \"{}\" is not a GPU index or UUID; {}", item, list, kForms);
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

// The scheduling flags given, as `--share 30%`, for messages; empty when none.
std::vector<std::string> scheduling_flags(const RunOptions& options) {
  std::vector<std::string> flags;
  if (options.share) flags.push_back("--share " + *options.share);
  if (options.limit) flags.push_back("--limit " + *options.limit);
  if (options.priority) flags.push_back("--priority " + *options.priority);
  return flags;
}

std::string join(const std::vector<std::string>& items, const char* separator = ", ") {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : separator) + item;
  return text;
}

std::string flag_names(const std::vector<std::string>& flags) {
  std::vector<std::string> names;
  for (const std::string& flag : flags) names.push_back(flag.substr(0, flag.find(' ')));
  return join(names, " and ");
}

// A scheduler started from a file decides every tenant's share, limit and priority. The
// flags are accepted when they say what the file says for --tenant (so a script that spells
// them out keeps working) and refused otherwise, with what to do instead.
void check_against_configured(const RunOptions& options, const std::string& socket, const wire::ControlReply& reply) {
  const std::vector<std::string> flags = scheduling_flags(options);
  if (flags.empty() && !options.tenant) return;  // its match rules decide
  const std::string file = reply.config_path[0] != '\0' ? reply.config_path : "its configuration file";
  const SegmentMapping segment(reply.shm_name);
  const SegmentSnapshot snapshot = take_snapshot(*segment);
  std::vector<std::string> names;
  const TenantSnapshot* tenant = nullptr;
  for (const TenantSnapshot& t : snapshot.tenants) {
    if (t.retired) continue;
    names.push_back(t.name);
    if (options.tenant && t.name == *options.tenant) tenant = &t;
  }
  if (options.tenant && tenant == nullptr)
    throw Error(ExitCode::kUsage,
                fmt::format("the scheduler at {} uses {}, which has no tenant `{}` (its tenants: {})", socket, file,
                            *options.tenant, join(names)),
                fmt::format("use --tenant with one of them, or add `{}` to {} and run `cuslice reload`", *options.tenant,
                            file));
  if (flags.empty()) return;
  if (tenant == nullptr)
    throw Error(ExitCode::kUsage,
                fmt::format("the scheduler at {} uses {}; tenants and their shares come from that file, so {} "
                            "cannot be applied",
                            socket, file, join(flags)),
                fmt::format("drop {}, or use --tenant NAME to join one of its tenants ({})", flag_names(flags),
                            join(names)));
  std::vector<std::string> differences;
  if (options.share && percent_to_ppm(percent_value(*options.share)) != tenant->share_ppm)
    differences.push_back(fmt::format("share {:g}% (asked: {})", ppm_to_percent(tenant->share_ppm), *options.share));
  if (options.limit && percent_to_ppm(percent_value(*options.limit)) != tenant->limit_ppm)
    differences.push_back(fmt::format("limit {:g}% (asked: {})", ppm_to_percent(tenant->limit_ppm), *options.limit));
  if (options.priority && *options.priority != priority_name(tenant->priority))
    differences.push_back(fmt::format("priority {} (asked: {})", priority_name(tenant->priority), *options.priority));
  if (!differences.empty())
    throw Error(ExitCode::kUsage,
                fmt::format("the scheduler at {} uses {}, where tenant `{}` has {}", socket, file, tenant->name,
                            join(differences)),
                fmt::format("drop {} (the file decides), or change {} and run `cuslice reload`", flag_names(flags),
                            file));
}

// Makes sure the command has a scheduler (see the top of this file) and sets what the hook
// needs to join it.
void join_scheduler(const RunOptions& options) {
  const SocketChoice choice = socket_choice(options.socket, options.control_socket);
  FoundScheduler found = connect_or_start_scheduler(choice);
  if (choice.chosen) set_env(wire::kSocketEnv, found.socket);
  // So that a `cuslice run` inside the command finds the same pair of sockets.
  set_env_if(wire::kControlSocketEnv, options.control_socket);
  if (!found.connection) {
    // Auto-start is off and nobody answers: the command runs unscheduled (its hook joins a
    // scheduler that starts later), so there is nobody to apply a share to.
    const std::vector<std::string> flags = scheduling_flags(options);
    if (!flags.empty())
      throw Error(ExitCode::kUsage,
                  fmt::format("{} needs a scheduler, and none answers on {} ({}=0: none is started)", join(flags),
                              choice.describe(), kAutoStartEnv),
                  fmt::format("drop {}, or unset {} so that `cuslice run` starts one", flag_names(flags),
                              kAutoStartEnv));
    return;
  }

  // The control connection before the question, so that an ephemeral scheduler, which
  // exits soon after its last connection closes, always has one of ours open.
  std::string control_why;
  std::optional<SchedulerConnection> control = connect_control(found.control, control_why);
  wire::ControlRequest describe;
  describe.command = wire::ControlCommand::kDescribe;
  const wire::ControlReply described = found.connection->request(describe);
  if ((described.flags & shm::Segment::kEphemeral) == 0) {
    // A scheduler with a configuration file: its tenants, its match rules.
    check_against_configured(options, found.socket, described);
    set_env(wire::kSocketEnv, found.socket);
    return;
  }
  if (!control)
    throw Error(ExitCode::kFailure,
                fmt::format("the scheduler at {} takes tenants on its control socket, and {}", found.socket,
                            control_why),
                "pass --control-socket PATH if it has another one, or --socket PATH to start a scheduler of your own");

  wire::ControlRequest request;
  request.command = wire::ControlCommand::kEnsureTenant;
  request.tenant = tenant_spec(options);
  const wire::ControlReply reply = control->request(request);
  switch (reply.status) {
    case wire::ControlStatus::kOk:
      // The descriptor stays open in the command, unnamed: the daemon only needs it open.
      control->release_as_lease();
      set_env(wire::kSocketEnv, found.socket);
      set_env(wire::kTenantEnv, request.tenant.name);
      return;
    case wire::ControlStatus::kForbidden:
      throw Error(ExitCode::kFailure, fmt::format("the scheduler at {} does not take tenants from you: {}", found.socket,
                                                  reply.message),
                  "ask its owner to add the tenant, or pass --socket PATH to start a scheduler of your own");
    default:
      throw Error(ExitCode::kFailure,
                  fmt::format("the scheduler at {} refused the tenant: {}", found.socket, reply.message),
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
           "  cuslice run --tenant inference --gpus 0 -- ./serve\n"
           "A user other than root needs no set-up: with no scheduler at /run/cuslice, `run`\n"
           "starts one of the user's own in $XDG_RUNTIME_DIR/cuslice (else /tmp/cuslice-UID).\n";
  });

  cmd->add_option("--memory", options->memory,
                  "GPU memory quota of each of the command's processes, per GPU: 4GiB, 4Gi, 4096MiB, "
                  "4G (4*10^9 bytes) or 25% of the card (sets CUSLICE_MEMORY_LIMIT); with an "
                  "auto-started scheduler also the tenant's quota")
      ->type_name("SIZE")
      ->check(CLI::Validator(check_memory, ""));
  cmd->add_option("--tenant", options->tenant,
                  "Tenant to run as (sets CUSLICE_TENANT): one of a configured scheduler's, or, with "
                  "an auto-started scheduler, a new one (default: \"default\")")
      ->type_name("NAME")
      ->check(CLI::Validator(check_tenant, ""));
  cmd->add_option("--gpus", options->gpus,
                  "GPUs the command may see: indices or GPU-/MIG- UUIDs, comma-separated "
                  "(sets CUDA_VISIBLE_DEVICES)")
      ->type_name("LIST")
      ->check(CLI::Validator(check_gpus, ""));
  cmd->add_option("--log-level", options->log_level,
                  "How much the hook logs on stderr: off, error, warn, info or debug (sets "
                  "CUSLICE_LOG_LEVEL; default: error)")
      ->type_name("LEVEL")
      ->check(CLI::IsMember({"off", "error", "warn", "info", "debug"}));
  cmd->add_option("--hook", options->hook,
                  "libcuslice.so to preload (default: $CUSLICE_HOOK_PATH, then ../lib and ../hook "
                  "beside this program)")
      ->type_name("PATH");

  cmd->add_option("--socket", options->socket,
                  "Scheduler socket (sets CUSLICE_SOCKET; default: $CUSLICE_SOCKET, else "
                  "/run/cuslice/cuslice.sock, else your own scheduler's in $XDG_RUNTIME_DIR/cuslice "
                  "or /tmp/cuslice-UID)")
      ->type_name("PATH")
      ->transform(CLI::Validator(normalise_socket_flag, ""))
      ->group(kSchedulingGroup);
  cmd->add_option("--control-socket", options->control_socket,
                  "The scheduler's control socket, where an auto-started scheduler takes the tenant "
                  "(sets CUSLICE_CONTROL_SOCKET; default: $CUSLICE_CONTROL_SOCKET, else the socket's name in "
                  "<socket's directory>-control)")
      ->type_name("PATH")
      ->transform(CLI::Validator(normalise_socket_flag, ""))
      ->group(kSchedulingGroup);
  cmd->add_option("--share", options->share,
                  "Compute share guaranteed when the GPU is contended, e.g. 60%: the new tenant's, "
                  "or checked against a configured scheduler's --tenant")
      ->type_name("PCT")
      ->transform(CLI::Validator(normalise_percent, ""))
      ->group(kSchedulingGroup);
  cmd->add_option("--limit", options->limit,
                  "Most compute the tenant may use even when the GPU is idle, e.g. 80% (as --share)")
      ->type_name("PCT")
      ->transform(CLI::Validator(normalise_percent, ""))
      ->group(kSchedulingGroup);
  cmd->add_option("--priority", options->priority, "Scheduling priority: high, normal or low (as --share)")
      ->type_name("P")
      ->check(CLI::IsMember({"high", "normal", "low"}))
      ->group(kSchedulingGroup);

  cmd->add_option("CMD", options->command, "The command to run and its arguments")
      ->type_name("")
      ->required();

  cmd->callback([options, &chosen] { chosen = [options] { return run(*options); }; });
}

}  // namespace cuslice::cli
