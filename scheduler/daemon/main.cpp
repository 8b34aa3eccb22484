// cuslice-scheduler: the per-node daemon that shares each GPU among tenants. This file
// owns its command line and its exit status (protocol/exit_codes.h): 0 after a clean stop,
// 2 for bad flags, 3 for a configuration file with errors, 1 for any other failure.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>

#include "common/log_flags.h"
#include "common/logging.h"
#include "config/size.h"
#include "config/tenant_config.h"
#include "protocol/control_socket.h"
#include "protocol/exit_codes.h"
#include "protocol/shm_protocol.h"
#include "protocol/socket_protocol.h"
#include "scheduler/daemon/daemon.h"

namespace {

using cuslice::ExitCode;
using cuslice::to_int;

// What --version prints: the program's version and the protocols it speaks, so that a
// mismatch with a hook or a `cuslice` (`cuslice version`) can be seen at a glance.
std::string version_text() {
  return fmt::format(
      "cuslice-scheduler {}\n"
      "shared segment ABI {}.{}\n"
      "socket protocol: registration {}, control {}",
      CUSLICE_VERSION, cuslice::shm::kAbiMajor, cuslice::shm::kAbiMinor, cuslice::wire::kVersion,
      cuslice::wire::kControlVersion);
}

// --exit-when-idle: seconds as a bare number (what `cuslice run` passes) or a duration
// ("500ms"), through the one parser of durations, so that "inf" or "1e300" cannot reach the
// timer's arithmetic. Rewritten as seconds for CLI11's conversion to double.
std::string normalise_idle(std::string& text) {
  uint64_t ns = 0;
  const char* why = nullptr;
  const bool bare = !text.empty() && text.find_first_not_of("0123456789.") == std::string::npos;
  if (!cuslice::parse_duration(bare ? text + "s" : text, ns, &why))
    return fmt::format("\"{}\" is not a duration: {} (or a bare number of seconds, e.g. 2)", text, why);
  if (ns == 0) return fmt::format("\"{}\": the idle time must be above zero", text);
  text = fmt::format("{}", static_cast<double>(ns) / 1e9);
  return {};
}

// The control socket: --control-socket, else $CUSLICE_CONTROL_SOCKET, else derived from the
// tenant socket (control_socket.h). Never where tenants are given the tenant socket. Returns
// why not, or empty.
std::string resolve_control_socket(cuslice::DaemonOptions& options, bool flag_given) {
  namespace wire = cuslice::wire;
  const char* env = std::getenv(wire::kControlSocketEnv);
  const std::string derived = wire::default_control_socket(std::filesystem::absolute(options.socket_path).string());
  if (!flag_given) {
    options.control_socket_path = env && env[0] ? env : derived;
    if (options.control_socket_path.empty())
      return fmt::format("--socket {} has no directory to put a control socket beside; give --control-socket PATH",
                         options.socket_path);
  }
  const std::string& control = options.control_socket_path;
  if (control.empty() || control.back() == '/')
    return fmt::format("--control-socket \"{}\" is not a socket file's path", control);
  if (wire::control_socket_exposed(options.socket_path, control))
    return fmt::format(
        "the control socket {} is in the directory of the tenant socket {} (or below it), which tenants are given: "
        "put it in a directory of its own, e.g. {}",
        control, options.socket_path, derived.empty() ? wire::kDefaultControlSocketPath : derived);
  return {};
}

// The file is checked here, before the daemon takes the socket and the segment, so that a
// file with errors exits kConfigInvalid (with every error logged) rather than a generic 1.
bool config_is_valid(const std::string& path) {
  const cuslice::ConfigResult result = cuslice::load_config_file(path);
  for (const cuslice::ConfigError& e : result.errors) spdlog::error("{}", e.to_string());
  if (!result.ok()) spdlog::error("invalid configuration {}: not started", path);
  return result.ok();
}

// What the command line says, before it becomes DaemonOptions.
struct CommandLine {
  cuslice::DaemonOptions options;
  std::string level = "info";
  std::string target = "stderr";
  double idle_seconds = 0;
  uint16_t metrics_port = 0;
  std::string metrics_address;
};

void add_options(CLI::App& app, CommandLine& line) {
  cuslice::DaemonOptions& options = line.options;
  CLI::Option* config = app.add_option("--config", options.config_path, "tenant configuration (YAML)");
  CLI::Option* ephemeral =
      app.add_flag("--ephemeral", options.ephemeral,
                   "no configuration file: tenants are added by `cuslice run` (what auto-start uses)");
  config->excludes(ephemeral);
  app.add_flag("--watch-config", options.watch_config,
               "reload the configuration when its file changes (a Kubernetes ConfigMap, an edit), as on SIGHUP")
      ->needs(config);
  app.add_option("--exit-when-idle", line.idle_seconds,
                 "exit once no process, lease or request has been connected for SECONDS")
      ->type_name("SECONDS")
      ->transform(CLI::Validator(normalise_idle, ""));
  app.add_option("--socket", options.socket_path, "Unix socket hooks register on (default $CUSLICE_SOCKET or " +
                                                      std::string(cuslice::wire::kDefaultSocketPath) + ")");
  app.add_option("--control-socket", options.control_socket_path,
                 "Unix socket for reload, `cuslice run`'s tenants and the device plugin, open to root and this "
                 "user only; never inside --socket's directory (default $CUSLICE_CONTROL_SOCKET, else the "
                 "socket's name in <socket's directory>-control, e.g. " +
                     std::string(cuslice::wire::kDefaultControlSocketPath) + ")")
      ->type_name("PATH");
  app.add_option("--shm-name", options.shm_name, "shared-memory segment name")->capture_default_str();
  cuslice::add_log_flags(app, line.level, line.target, "stderr, or journald (native journal fields and priorities)");
  app.add_option("--metrics-port", line.metrics_port,
                 "serve Prometheus metrics at http://ADDRESS:PORT/metrics (overrides scheduler.metrics_port; "
                 "default: no metrics)")
      ->type_name("PORT")
      ->check(CLI::Range(1, 65535));
  app.add_option("--metrics-address", line.metrics_address,
                 "address the metrics endpoint listens on: an IPv4 or IPv6 literal (overrides "
                 "scheduler.metrics_address; default 127.0.0.1)")
      ->type_name("ADDRESS");
  app.add_option("--cuda-library", options.cuda_library,
                 "the driver library whose checkpoint API suspends preemptible tenants")
      ->capture_default_str();
  app.add_option("--meminfo", options.meminfo_path,
                 "where the host's available memory is read before a suspension (MemAvailable)")
      ->capture_default_str();
}

// The options once parsed, checked and completed; an exit status when they cannot be used.
std::optional<int> finish_options(const CLI::App& app, CommandLine& line) {
  cuslice::DaemonOptions& options = line.options;
  if (!options.ephemeral && options.config_path.empty()) {
    spdlog::error("give --config FILE, or --ephemeral to take tenants from `cuslice run`");
    return to_int(ExitCode::kUsage);
  }
  if (options.shm_name.empty() || options.shm_name[0] != '/' || options.shm_name.size() >= cuslice::shm::kNameSize) {
    spdlog::error("--shm-name must start with '/' and be shorter than {} characters", cuslice::shm::kNameSize);
    return to_int(ExitCode::kUsage);
  }
  if (const std::string why = resolve_control_socket(options, app.count("--control-socket") > 0); !why.empty()) {
    spdlog::error("{}", why);
    return to_int(ExitCode::kUsage);
  }
  // Absolute, so that `cuslice status` and reload messages name the file wherever they run.
  if (!options.config_path.empty()) options.config_path = std::filesystem::absolute(options.config_path).string();
  if (app.count("--exit-when-idle")) options.exit_when_idle_seconds = line.idle_seconds;
  if (app.count("--metrics-port")) options.metrics_port = line.metrics_port;
  if (app.count("--metrics-address")) options.metrics_address = line.metrics_address;
  if (!options.config_path.empty() && !config_is_valid(options.config_path)) return to_int(ExitCode::kConfigInvalid);
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cuslice-scheduler: shares each GPU among tenants by policy"};
  app.set_version_flag("--version", version_text());
  app.footer(
      "Exit status: 0 stopped cleanly, 1 failure, 2 bad flags, 3 configuration invalid "
      "(docs/reference/cli.md)");
  CommandLine line;
  const char* env_socket = std::getenv(cuslice::wire::kSocketEnv);
  line.options.socket_path = env_socket && env_socket[0] ? env_socket : cuslice::wire::kDefaultSocketPath;
  line.options.shm_name = cuslice::shm::kDefaultName;
  add_options(app, line);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // the message, on stderr
    return to_int(ExitCode::kUsage);
  }

  cuslice::configure_logging(line.target == "journald" ? cuslice::LogTarget::kJournald : cuslice::LogTarget::kStderr,
                             spdlog::level::from_str(line.level));
  if (const std::optional<int> status = finish_options(app, line)) return *status;

  // SIGTERM, SIGINT and SIGHUP stay pending until the daemon reads them from its signalfd.
  // Blocked here, before it takes the socket and the segment, a stop that comes while it
  // starts is still a clean stop (exit 0, segment removed), not death by the signal.
  sigset_t signals;
  sigemptyset(&signals);
  for (const int s : {SIGHUP, SIGTERM, SIGINT}) sigaddset(&signals, s);
  sigprocmask(SIG_BLOCK, &signals, nullptr);

  try {
    cuslice::Daemon daemon(line.options);
    return daemon.run();
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return to_int(ExitCode::kFailure);
  }
}
