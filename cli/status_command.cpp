// `cuslice status [--json] [--watch [SECONDS]] [--shm-name N] [--socket P]`: what every
// tenant has and gets on every GPU, read from the scheduler's shared segment.
//
// The segment is the source of truth and is mapped read-only; the socket is only asked
// which segment to read (when --shm-name is not given) and whether the daemon answers. So
// the output does not depend on the daemon being reachable while its segment exists.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "commands.h"
#include "error.h"
#include "scheduler_autostart.h"
#include "scheduler_socket.h"
#include "segment_mapping.h"
#include "segment_snapshot.h"
#include "status_view.h"

namespace cuslice::cli {
namespace {

// A daemon that accepts but does not answer (stopped, swamped) must not stall the status
// the segment can give on its own.
constexpr int kDescribeTimeoutMs = 1'000;

struct StatusOptions {
  bool json = false;
  std::optional<double> watch_seconds;
  std::optional<std::string> shm_name;
  std::optional<std::string> socket;
};

// One look at the daemon and its segment, rendered. Throws Error when there is no segment.
std::string render_once(const StatusOptions& options) {
  DaemonView daemon;
  daemon.socket_path = resolve_socket_path(options.socket);
  std::optional<wire::ControlReply> described;
  try {
    described = ask_scheduler(daemon.socket_path, wire::ControlCommand::kDescribe, kDescribeTimeoutMs);
  } catch (const Error&) {
    // Not answering (or not ours): the segment can still be read.
  }
  daemon.reachable = described && described->status == wire::ControlStatus::kOk;
  if (daemon.reachable) {
    try {
      if (auto connection = SchedulerConnection::connect(daemon.socket_path))
        daemon.workloads = connection->workloads(kDescribeTimeoutMs);
    } catch (const Error&) {
      // Labels are extra: the status stands without them.
    }
  }
  if (daemon.reachable && described->config_path[0] != '\0') daemon.config_path = described->config_path;
  daemon.shm_name = options.shm_name    ? *options.shm_name
                    : daemon.reachable ? std::string(described->shm_name)
                                       : shm_name_for_socket(daemon.socket_path);

  const SegmentMapping segment(daemon.shm_name);
  const SegmentSnapshot snapshot = take_snapshot(*segment);
  return options.json ? status_json(snapshot, daemon).dump() + "\n" : status_table(snapshot, daemon);
}

int status(const StatusOptions& options) {
  if (!options.watch_seconds) {
    std::fputs(render_once(options).c_str(), stdout);
    return to_int(ExitCode::kOk);
  }
  // --watch: redraw in place on a terminal; elsewhere (a pipe, --json) one document after
  // another, so `cuslice status --json --watch 1 | jq` sees a stream of objects.
  const bool redraw = !options.json && ::isatty(STDOUT_FILENO);
  const auto period = std::chrono::duration<double>(*options.watch_seconds);
  for (;;) {
    std::string frame;
    try {
      frame = render_once(options);
    } catch (const Error& e) {
      // The daemon may be restarting; keep watching rather than exit.
      frame = fmt::format("cuslice status: {}\n", e.what());
    }
    if (redraw) frame = "\x1b[H\x1b[2J" + frame;
    std::fputs(frame.c_str(), stdout);
    std::fflush(stdout);
    std::this_thread::sleep_for(period);
  }
}

}  // namespace

void add_status_command(CLI::App& root, Action& chosen) {
  auto options = std::make_shared<StatusOptions>();
  CLI::App* cmd = root.add_subcommand("status", "Show every tenant's memory, share and waiting time on every GPU");
  cmd->add_flag("--json", options->json, "Print JSON (schema in docs/operations.md) instead of a table");
  cmd->add_option("--watch", options->watch_seconds, "Refresh every SECONDS (default 2) until interrupted")
      ->expected(0, 1)
      ->default_str("2")
      ->type_name("[SECONDS]")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--shm-name", options->shm_name,
                  "Shared segment to read (default: the one the scheduler on the socket names)")
      ->type_name("NAME");
  cmd->add_option("--socket", options->socket, "Scheduler socket (default: $CUSLICE_SOCKET, then /run/cuslice/cuslice.sock)")
      ->type_name("PATH");
  cmd->callback([options, &chosen] { chosen = [options] { return status(*options); }; });
}

}  // namespace cuslice::cli
