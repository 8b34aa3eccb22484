#include "node/agent_options.h"

#include <spdlog/spdlog.h>

#include "common/log_flags.h"
#include "common/logging.h"
#include "config/size.h"
#include "protocol/control_socket.h"

namespace cuslice::node {

void add_scheduler_options(CLI::App& app, MountOptions& mounts, std::string& scheduler_socket,
                           std::string& control_socket, std::string& preload_file) {
  app.add_option("--scheduler-socket", scheduler_socket,
                 "cuslice-scheduler's socket; its directory is mounted into containers")
      ->capture_default_str();
  app.add_option("--scheduler-control-socket", control_socket,
                 "cuslice-scheduler's control socket, where tenants are made; never in --scheduler-socket's "
                 "directory (default: the socket's name in <its directory>-control, e.g. " +
                     std::string(wire::kDefaultControlSocketPath) + ")")
      ->type_name("PATH");
  app.add_option("--hook", mounts.hook_host_path, "libcuslice.so on the node, mounted into containers")->required();
  app.add_option("--preload-file", preload_file,
                 "file the plugin writes, naming the hook, mounted as containers' /etc/ld.so.preload (empty: no "
                 "mount; then the image or pod must preload the hook)")
      ->capture_default_str();
  app.add_option("--shm-name", mounts.shm_name, "the scheduler's shared-memory segment")->capture_default_str();
  app.add_option("--dev-root", mounts.dev_root, "where the NVIDIA device nodes are")->capture_default_str();
}

int finish_scheduler_options(const CLI::App& app, MountOptions& mounts, const std::string& scheduler_socket,
                             std::string& control_socket, const std::string& preload_file) {
  if (const std::string why = settle_scheduler_paths(mounts, scheduler_socket,
                                                     app.count("--scheduler-control-socket") > 0, control_socket);
      !why.empty()) {
    spdlog::error("{}", why);
    return 2;
  }
  // The hook containers are given must exist; the preload file naming it is written now.
  std::string why;
  if (const int status = provide_hook(mounts, preload_file, why); status != 0) {
    spdlog::error("{}", why);
    return status;
  }
  return 0;
}

void add_log_options(CLI::App& app, LogOptions& log) {
  add_log_flags(app, log.level, log.target, "stderr, or journald");
}

void start_logging(const LogOptions& log) {
  configure_logging(log.target == "journald" ? LogTarget::kJournald : LogTarget::kStderr,
                    spdlog::level::from_str(log.level));
}

std::optional<int> start_agent(CLI::App& app, int argc, char** argv, const LogOptions& log,
                               const std::function<int()>& finish) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  start_logging(log);
  if (const int status = finish(); status != 0) return status;
  return std::nullopt;
}

bool bytes_of_option(const char* option, const std::string& text, uint64_t& bytes, std::string& why) {
  SizeSpec size;
  const char* size_why = "";
  if (parse_size(text, size, &size_why) && size.kind == SizeSpec::Kind::kBytes) {
    bytes = size.bytes;
    return true;
  }
  why = std::string(option) + " " + text + ": " +
        (size.kind == SizeSpec::Kind::kPercent ? "give a size in bytes (e.g. 2GiB)" : size_why);
  return false;
}

CLI::Option* add_seconds_option(CLI::App& app, const std::string& name, double& seconds, const std::string& what,
                                double min, double max) {
  return app.add_option(name, seconds, what)->check(CLI::Range(min, max))->capture_default_str();
}

std::chrono::milliseconds milliseconds_of(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace cuslice::node
