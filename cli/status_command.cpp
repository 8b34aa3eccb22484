// `cuslice status [--json] [--watch [INTERVAL]] [--shm-name N] [--socket P]`: what every
// tenant has and gets on every GPU, read from the scheduler's shared segment.
//
// The segment is the source of truth and is mapped read-only; the socket is only asked
// which segment to read (when --shm-name is not given) and whether the daemon answers. So
// the output does not depend on the daemon being reachable while its segment exists.
//
// stdout carries only the table or the JSON documents (one per refresh, each valid JSON);
// every error goes to stderr. With no scheduler and no segment, status exits at once with
// kNoScheduler, --watch included; once --watch has shown something, a scheduler that goes
// away (a restart) is reported on stderr and watched for until interrupted.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/cdi_spec.h"
#include "cli/commands.h"
#include "cli/error.h"
#include "cli/flag_wiring.h"
#include "cli/scheduler_autostart.h"
#include "cli/scheduler_socket.h"
#include "cli/segment_mapping.h"
#include "cli/status_view.h"
#include "common/segment_snapshot.h"
#include "config/size.h"

namespace cuslice::cli {
namespace {

// A daemon that accepts but does not answer (stopped, swamped) must not stall the status
// the segment can give on its own.
constexpr int kDescribeTimeoutMs = 1'000;
constexpr uint64_t kMinWatchNs = 100'000'000;        // 0.1 s: a redraw loop, not a busy loop
constexpr uint64_t kMaxWatchNs = 86'400'000'000'000;  // a day

struct StatusOptions {
  bool json = false;
  std::optional<double> watch_seconds;
  std::optional<std::string> shm_name;
  std::optional<std::string> socket;
};

// --watch's interval: seconds as a bare number (as it always was) or a duration ("500ms").
// Rewritten to seconds for CLI11's conversion to double.
std::string normalise_interval(std::string& text) {
  uint64_t ns = 0;
  const char* why = nullptr;
  const bool bare = !text.empty() && text.find_first_not_of("0123456789.") == std::string::npos;
  if (!parse_duration(bare ? text + "s" : text, ns, &why))
    return fmt::format("\"{}\" is not an interval: {} (or a bare number of seconds, e.g. 2)", text, why);
  if (ns < kMinWatchNs || ns > kMaxWatchNs)
    return fmt::format("\"{}\" is outside 0.1s to 24h", text);
  text = fmt::format("{}", static_cast<double>(ns) / 1e9);
  return {};
}

std::string check_shm_name(std::string& name) {
  const std::string problem = shm_name_problem(name);
  return problem.empty() ? problem : fmt::format("\"{}\": {}", name, problem);
}

// Why tenants are suspended (or were refused, or failed), from the daemon: one line per tenant,
// `name<TAB>state<TAB>reason`, and the fast suspension's figures, `@facts<TAB>name<TAB>path<TAB>
// moved_out<TAB>host_pool<TAB>movable<TAB>time_to_room_ns`. Nothing from a daemon that does not
// know the request.
void read_preemption(const std::string& socket, DaemonView& daemon) {
  std::map<std::string, std::string>& reasons = daemon.preemption_reasons;
  std::optional<wire::ControlReply> reply;
  try {
    reply = ask_scheduler(socket, wire::ControlCommand::kPreemption, kDescribeTimeoutMs);
  } catch (const Error&) {
    return;
  }
  if (!reply || reply->status != wire::ControlStatus::kOk) return;
  const std::string text(reply->message, strnlen(reply->message, sizeof reply->message));
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string entry = text.substr(at, end - at);
    at = end + 1;
    if (entry.rfind("@facts\t", 0) == 0) {
      std::vector<std::string> f;
      for (size_t from = 0;;) {
        const size_t tab = entry.find('\t', from);
        f.push_back(entry.substr(from, tab == std::string::npos ? std::string::npos : tab - from));
        if (tab == std::string::npos) break;
        from = tab + 1;
      }
      if (f.size() < 7) continue;
      DaemonView::PreemptionFacts facts;
      facts.path = f[2] == "-" ? "" : f[2];
      facts.moved_out = std::strtoull(f[3].c_str(), nullptr, 10);
      facts.host_pool = std::strtoull(f[4].c_str(), nullptr, 10);
      facts.movable = std::strtoull(f[5].c_str(), nullptr, 10);
      facts.time_to_room = static_cast<double>(std::strtoull(f[6].c_str(), nullptr, 10)) / 1e9;
      daemon.preemption_facts[f[1]] = facts;
      continue;
    }
    const size_t first = entry.find('\t');
    const size_t second = first == std::string::npos ? first : entry.find('\t', first + 1);
    if (second == std::string::npos) continue;
    reasons[entry.substr(0, first)] = entry.substr(second + 1);
  }
}

struct Found {
  DaemonView daemon;
  std::unique_ptr<SegmentMapping> segment;
};

// The scheduler to show: the first candidate socket that answers; else the first whose
// segment is still there (a daemon killed, or not answering). Throws Error (kNoScheduler)
// when there is neither.
Found find_scheduler(const StatusOptions& options) {
  const SocketChoice choice = socket_choice(options.socket);
  for (size_t i = 0; i < choice.candidates.size(); ++i) {
    if (!choice.ready(i, false)) continue;
    const std::string& socket = choice.candidates[i];
    std::optional<wire::ControlReply> described;
    try {
      described = ask_scheduler(socket, wire::ControlCommand::kDescribe, kDescribeTimeoutMs);
    } catch (const Error&) {
      // Not answering (or not ours): the segment can still be read.
    }
    if (!described || described->status != wire::ControlStatus::kOk) continue;
    DaemonView daemon;
    daemon.socket_path = socket;
    daemon.reachable = true;
    if (described->config_path[0] != '\0') daemon.config_path = described->config_path;
    daemon.shm_name = options.shm_name.value_or(described->shm_name);
    try {
      if (auto connection = SchedulerConnection::connect(socket))
        daemon.workloads = connection->workloads(kDescribeTimeoutMs);
    } catch (const Error&) {
      // Labels are extra: the status stands without them.
    }
    read_preemption(socket, daemon);
    return {daemon, std::make_unique<SegmentMapping>(daemon.shm_name)};
  }
  for (size_t i = 0; i < choice.candidates.size(); ++i) {
    if (!choice.ready(i, false)) continue;
    const std::string& socket = choice.candidates[i];
    DaemonView daemon;
    daemon.socket_path = socket;
    daemon.shm_name = options.shm_name.value_or(shm_name_for_socket(socket));
    try {
      return {daemon, std::make_unique<SegmentMapping>(daemon.shm_name)};
    } catch (const Error& e) {
      if (e.code() != ExitCode::kNoScheduler) throw;  // there, but unreadable: say why
    }
  }
  throw Error(ExitCode::kNoScheduler,
              options.shm_name ? fmt::format("no scheduler answers on {}, and there is no segment {}", choice.describe(),
                                             *options.shm_name)
                               : fmt::format("no scheduler answers on {}", choice.describe()),
              "`cuslice run` starts one; a node-wide one is `systemctl start cuslice-scheduler` (docs/reference/cli.md)");
}

// One look at the daemon and its segment, rendered. Throws Error.
std::string render_once(const StatusOptions& options) {
  const Found found = find_scheduler(options);
  const SegmentSnapshot snapshot = take_snapshot(**found.segment);
  return options.json ? status_json(snapshot, found.daemon).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n" : status_table(snapshot, found.daemon);
}

void write_stdout(const std::string& text) {
  if (std::fputs(text.c_str(), stdout) == EOF || std::fflush(stdout) != 0)
    throw Error(ExitCode::kFailure, "cannot write to standard output");
}

int status(const StatusOptions& options) {
  // The first look decides: no scheduler is an error at once, --watch or not.
  std::string frame = render_once(options);
  if (!options.watch_seconds) {
    write_stdout(frame);
    return to_int(ExitCode::kOk);
  }
  // --watch: redraw in place on a terminal; elsewhere (a pipe, --json) one document after
  // another, so `cuslice status --json --watch 1 | jq` sees a stream of objects.
  const bool redraw = !options.json && ::isatty(STDOUT_FILENO);
  const auto period = std::chrono::duration<double>(*options.watch_seconds);
  for (;;) {
    write_stdout(redraw ? "\x1b[H\x1b[2J" + frame : frame);
    std::this_thread::sleep_for(period);
    for (;;) {
      try {
        frame = render_once(options);
        break;
      } catch (const Error& e) {
        // The daemon may be restarting: say so on stderr and keep watching.
        print_error("cuslice status", e.what(), "");
        std::this_thread::sleep_for(period);
      }
    }
  }
}

}  // namespace

void add_status_command(CLI::App& root, Action& chosen) {
  auto options = std::make_shared<StatusOptions>();
  CLI::App* cmd = root.add_subcommand("status", "Show every tenant's memory, share and waiting time on every GPU");
  cmd->add_flag("--json", options->json, "Print JSON (schema in docs/reference/operations.md) instead of a table");
  cmd->add_option("--watch", options->watch_seconds,
                  "Refresh every INTERVAL until interrupted: seconds (default 2) or a duration such as 500ms")
      ->expected(0, 1)
      ->default_str("2")
      ->type_name("[INTERVAL]")
      ->transform(CLI::Validator(normalise_interval, ""));
  add_checked_flag(*cmd, "--shm-name", options->shm_name, "NAME",
                   "Shared segment to read (default: the one the scheduler on the socket names)", check_shm_name);
  add_socket_flag(*cmd, "--socket", options->socket, kSocketFlagHelp);
  cmd->callback([options, &chosen] { chosen = [options] { return status(*options); }; });
}

}  // namespace cuslice::cli
