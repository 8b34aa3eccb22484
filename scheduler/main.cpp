// cuslice-scheduler: the per-node daemon that shares each GPU among tenants.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <exception>
#include <filesystem>

#include "daemon.h"
#include "logging.h"
#include "shm_protocol.h"
#include "socket_protocol.h"

int main(int argc, char** argv) {
  CLI::App app{"cuslice-scheduler: shares each GPU among tenants by policy"};
  cuslice::DaemonOptions options;
  const char* env_socket = std::getenv(cuslice::wire::kSocketEnv);
  options.socket_path = env_socket && env_socket[0] ? env_socket : cuslice::wire::kDefaultSocketPath;
  options.shm_name = cuslice::shm::kDefaultName;
  std::string level = "info";
  std::string target = "stderr";
  double idle_seconds = 0;
  uint16_t metrics_port = 0;

  CLI::Option* config = app.add_option("--config", options.config_path, "tenant configuration (YAML)");
  CLI::Option* ephemeral =
      app.add_flag("--ephemeral", options.ephemeral,
                   "no configuration file: tenants are added by `cuslice run` (what auto-start uses)");
  config->excludes(ephemeral);
  app.add_flag("--watch-config", options.watch_config,
               "reload the configuration when its file changes (a Kubernetes ConfigMap, an edit), as on SIGHUP")
      ->needs(config);
  app.add_option("--exit-when-idle", idle_seconds,
                 "exit once no process, lease or request has been connected for SECONDS")
      ->type_name("SECONDS")
      ->check(CLI::PositiveNumber);
  app.add_option("--socket", options.socket_path, "Unix socket hooks register on (default $CUSLICE_SOCKET or " +
                                                      std::string(cuslice::wire::kDefaultSocketPath) + ")");
  app.add_option("--shm-name", options.shm_name, "shared-memory segment name")->capture_default_str();
  app.add_option("--log-level", level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_option("--log-target", target, "stderr, or journald (native journal fields and priorities)")
      ->check(CLI::IsMember({"stderr", "journald"}))
      ->capture_default_str();
  app.add_option("--metrics-port", metrics_port,
                 "serve Prometheus metrics at http://ADDRESS:PORT/metrics (overrides scheduler.metrics_port; "
                 "default: no metrics)")
      ->type_name("PORT")
      ->check(CLI::Range(1, 65535));
  app.add_option("--metrics-address", options.metrics_address, "IPv4 address the metrics endpoint listens on")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  cuslice::configure_logging(target == "journald" ? cuslice::LogTarget::kJournald : cuslice::LogTarget::kStderr,
                             spdlog::level::from_str(level));
  if (!options.ephemeral && options.config_path.empty()) {
    spdlog::error("give --config FILE, or --ephemeral to take tenants from `cuslice run`");
    return 2;
  }
  if (options.shm_name.empty() || options.shm_name[0] != '/' || options.shm_name.size() >= cuslice::shm::kNameSize) {
    spdlog::error("--shm-name must start with '/' and be shorter than {} characters", cuslice::shm::kNameSize);
    return 2;
  }
  // Absolute, so that `cuslice status` and reload messages name the file wherever they run.
  if (!options.config_path.empty()) options.config_path = std::filesystem::absolute(options.config_path).string();
  if (app.count("--exit-when-idle")) options.exit_when_idle_seconds = idle_seconds;
  if (app.count("--metrics-port")) options.metrics_port = metrics_port;

  try {
    cuslice::Daemon daemon(options);
    return daemon.run();
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}
