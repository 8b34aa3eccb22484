// cuslice-scheduler: the per-node daemon that shares each GPU among tenants.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <exception>

#include "daemon.h"
#include "shm_protocol.h"
#include "socket_protocol.h"

int main(int argc, char** argv) {
  CLI::App app{"cuslice-scheduler: shares each GPU among tenants by policy"};
  cuslice::DaemonOptions options;
  const char* env_socket = std::getenv(cuslice::wire::kSocketEnv);
  options.socket_path = env_socket && env_socket[0] ? env_socket : cuslice::wire::kDefaultSocketPath;
  options.shm_name = cuslice::shm::kDefaultName;
  std::string level = "info";
  app.add_option("--config", options.config_path, "tenant configuration (YAML)")->required();
  app.add_option("--socket", options.socket_path, "Unix socket hooks register on (default $CUSLICE_SOCKET or " +
                                                      std::string(cuslice::wire::kDefaultSocketPath) + ")");
  app.add_option("--shm-name", options.shm_name, "shared-memory segment name")->capture_default_str();
  app.add_option("--log-level", level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (options.shm_name.empty() || options.shm_name[0] != '/' || options.shm_name.size() >= cuslice::shm::kNameSize) {
    spdlog::error("--shm-name must start with '/' and be shorter than {} characters", cuslice::shm::kNameSize);
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(level));

  try {
    cuslice::Daemon daemon(options);
    return daemon.run();
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}
