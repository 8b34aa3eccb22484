// Joining a scheduler for `cuslice run` (scheduler_join.h).
#include "cli/scheduler_join.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "cli/command_exec.h"
#include "cli/error.h"
#include "cli/own_tenant.h"
#include "cli/run_flags.h"
#include "cli/scheduler_autostart.h"
#include "cli/scheduler_socket.h"
#include "cli/segment_mapping.h"
#include "common/segment_snapshot.h"
#include "config/size.h"
#include "protocol/control_socket.h"
#include "protocol/ppm.h"
#include "protocol/socket_protocol.h"

namespace cuslice::cli {
namespace {

// --gpus as the GPUs the tenant's share is counted on: bit g for index g. UUIDs name no index
// here (the CLI does not open NVML), so a list with one counts on every GPU (0).
uint32_t gpu_mask(const std::optional<std::string>& gpus) {
  if (!gpus) return 0;
  uint32_t mask = 0;
  size_t start = 0;
  for (;;) {
    const size_t comma = gpus->find(',', start);
    const std::string item = gpus->substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty() || item.size() > 2 || item.find_first_not_of("0123456789") != std::string::npos) return 0;
    const unsigned long index = std::stoul(item);
    if (index >= shm::kMaxGpus) return 0;
    mask |= 1u << index;
    if (comma == std::string::npos) return mask;
    start = comma + 1;
  }
}

// The tenant an ephemeral scheduler should hold for this command: --tenant, else one of
// the command's own.
wire::TenantSpec tenant_spec(const RunOptions& options) {
  wire::TenantSpec spec;
  const std::string name = options.tenant.value_or(own_tenant_name(options.command.front(), ::getpid()));
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
  spec.gpu_mask = gpu_mask(options.gpus);
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

// Where the flags and --tenant's entry in the file disagree, as "share 30% (asked: 40%)".
std::vector<std::string> differences(const RunOptions& options, const TenantSnapshot& tenant) {
  std::vector<std::string> out;
  if (options.share && percent_to_ppm(percent_value(*options.share)) != tenant.share_ppm)
    out.push_back(fmt::format("share {:g}% (asked: {})", ppm_to_percent(tenant.share_ppm), *options.share));
  if (options.limit && percent_to_ppm(percent_value(*options.limit)) != tenant.limit_ppm)
    out.push_back(fmt::format("limit {:g}% (asked: {})", ppm_to_percent(tenant.limit_ppm), *options.limit));
  if (options.priority && *options.priority != priority_name(tenant.priority))
    out.push_back(fmt::format("priority {} (asked: {})", priority_name(tenant.priority), *options.priority));
  return out;
}

// The configured scheduler's tenants (not the retired), and the one --tenant names, if any.
struct ConfiguredTenants {
  std::vector<std::string> names;
  std::optional<TenantSnapshot> named;
};

ConfiguredTenants configured_tenants(const RunOptions& options, const wire::ControlReply& reply) {
  const SegmentMapping segment(reply.shm_name);
  const SegmentSnapshot snapshot = take_snapshot(*segment);
  ConfiguredTenants out;
  for (const TenantSnapshot& t : snapshot.tenants) {
    if (t.retired) continue;
    out.names.push_back(t.name);
    if (options.tenant && t.name == *options.tenant) out.named = t;
  }
  return out;
}

// A scheduler started from a file decides every tenant's share, limit and priority. The
// flags are accepted when they say what the file says for --tenant (so a script that spells
// them out keeps working) and refused otherwise, with what to do instead.
void check_against_configured(const RunOptions& options, const std::string& socket, const wire::ControlReply& reply) {
  const std::vector<std::string> flags = scheduling_flags(options);
  if (flags.empty() && !options.tenant) return;  // its match rules decide
  const std::string file = reply.config_path[0] != '\0' ? reply.config_path : "its configuration file";
  const ConfiguredTenants tenants = configured_tenants(options, reply);
  if (options.tenant && !tenants.named)
    throw Error(ExitCode::kUsage,
                fmt::format("the scheduler at {} uses {}, which has no tenant `{}` (its tenants: {})", socket, file,
                            *options.tenant, join(tenants.names)),
                fmt::format("use --tenant with one of them, or add `{}` to {} and run `cuslice reload`", *options.tenant,
                            file));
  if (flags.empty()) return;
  if (!tenants.named)
    throw Error(ExitCode::kUsage,
                fmt::format("the scheduler at {} uses {}; tenants and their shares come from that file, so {} "
                            "cannot be applied",
                            socket, file, join(flags)),
                fmt::format("drop {}, or use --tenant NAME to join one of its tenants ({})", flag_names(flags),
                            join(tenants.names)));
  if (const std::vector<std::string> found = differences(options, *tenants.named); !found.empty())
    throw Error(ExitCode::kUsage,
                fmt::format("the scheduler at {} uses {}, where tenant `{}` has {}", socket, file, tenants.named->name,
                            join(found)),
                fmt::format("drop {} (the file decides), or change {} and run `cuslice reload`", flag_names(flags),
                            file));
}

// Auto-start is off and nobody answers: the command runs unscheduled (its hook joins a
// scheduler that starts later), so there is nobody to apply a share to.
void check_unscheduled(const RunOptions& options, const SocketChoice& choice) {
  const std::vector<std::string> flags = scheduling_flags(options);
  if (!flags.empty())
    throw Error(ExitCode::kUsage,
                fmt::format("{} needs a scheduler, and none answers on {} ({}=0: none is started)", join(flags),
                            choice.describe(), kAutoStartEnv),
                fmt::format("drop {}, or unset {} so that `cuslice run` starts one", flag_names(flags),
                            kAutoStartEnv));
}

// Has an ephemeral scheduler take the command's tenant on `control`, which then becomes the
// command's lease.
void add_tenant(const RunOptions& options, const FoundScheduler& found, SchedulerConnection& control) {
  wire::ControlRequest request;
  request.command = wire::ControlCommand::kEnsureTenant;
  request.tenant = tenant_spec(options);
  const wire::ControlReply reply = control.request(request);
  switch (reply.status) {
    case wire::ControlStatus::kOk:
      // The descriptor stays open in the command, unnamed: the daemon only needs it open.
      control.release_as_lease();
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

}  // namespace

void join_scheduler(const RunOptions& options) {
  const SocketChoice choice = socket_choice(options.socket, options.control_socket);
  FoundScheduler found = connect_or_start_scheduler(choice);
  if (choice.chosen) set_env(wire::kSocketEnv, found.socket);
  // So that a `cuslice run` inside the command finds the same pair of sockets.
  set_env_if(wire::kControlSocketEnv, options.control_socket);
  if (!found.connection) {
    check_unscheduled(options, choice);
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
  add_tenant(options, found, *control);
}

}  // namespace cuslice::cli
