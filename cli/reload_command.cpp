// `cuslice reload [--socket P] [--control-socket C]`: makes the scheduler re-read its
// configuration file, as SIGHUP (`systemctl reload`) does, but answers: exit 0 with
// "reloaded FILE", or exit 3 with every error of the file as file:line:column: message (the
// running configuration stays in force), or exit 4 when no scheduler answers. The request
// goes to the scheduler's control socket, which only root and its user may reach.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/error.h"
#include "cli/flag_wiring.h"
#include "cli/scheduler_socket.h"

namespace cuslice::cli {
namespace {

constexpr const char* kDeniedHint =
    "only root and the scheduler's own user may reload it (its control socket is theirs alone): run it as one of "
    "them";

int reload(const std::optional<std::string>& socket_flag, const std::optional<std::string>& control_flag) {
  const SocketChoice choice = socket_choice(socket_flag, control_flag);
  std::optional<wire::ControlReply> reply;
  for (size_t i = 0; i < choice.candidates.size() && !reply; ++i)
    if (choice.ready(i, false))
      reply = ask_scheduler(choice.control(i), wire::ControlCommand::kReload, kReplyTimeoutMs, kDeniedHint);
  if (!reply) {
    // A scheduler answering on a socket whose control socket is elsewhere.
    for (size_t i = 0; i < choice.candidates.size(); ++i)
      if (choice.ready(i, false) && SchedulerConnection::connect(choice.candidates[i]))
        throw Error(ExitCode::kFailure,
                    fmt::format("the scheduler on {} does not answer on the control socket {}", choice.candidates[i],
                                choice.control(i)),
                    "pass --control-socket PATH: the scheduler's --control-socket");
    throw Error(ExitCode::kNoScheduler, fmt::format("no scheduler answers on {}", choice.describe()),
                "start it (systemctl start cuslice-scheduler), or pass --socket PATH");
  }
  switch (reply->status) {
    case wire::ControlStatus::kOk:
      std::printf("%s", reply->message);
      return to_int(ExitCode::kOk);
    case wire::ControlStatus::kFailed:
      // The daemon's own lines, unchanged: editors and CI parse file:line:column.
      std::fprintf(stderr, "%s", reply->message);
      std::fprintf(stderr, "cuslice reload: %s has errors; the scheduler keeps its running configuration\n",
                   reply->config_path);
      return to_int(ExitCode::kConfigInvalid);
    case wire::ControlStatus::kForbidden:
      throw Error(ExitCode::kFailure, reply->message, "run it as root or as the scheduler's user");
    default:
      throw Error(ExitCode::kFailure, reply->message);
  }
}

}  // namespace

void add_reload_command(CLI::App& root, Action& chosen) {
  auto socket = std::make_shared<std::optional<std::string>>();
  auto control = std::make_shared<std::optional<std::string>>();
  CLI::App* cmd = root.add_subcommand("reload", "Make the scheduler re-read its configuration file");
  add_socket_flag(*cmd, "--socket", *socket, kSocketFlagHelp);
  add_socket_flag(*cmd, "--control-socket", *control,
                  "The scheduler's control socket, where the request goes (default: $CUSLICE_CONTROL_SOCKET, else "
                  "the socket's name in <socket's directory>-control, e.g. /run/cuslice-control/cuslice.sock)");
  cmd->callback([socket, control, &chosen] { chosen = [socket, control] { return reload(*socket, *control); }; });
}

}  // namespace cuslice::cli
