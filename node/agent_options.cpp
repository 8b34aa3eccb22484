#include "node/agent_options.h"

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

void add_log_options(CLI::App& app, std::string& level, std::string& target) {
  app.add_option("--log-level", level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_option("--log-target", target, "stderr, or journald")
      ->check(CLI::IsMember({"stderr", "journald"}))
      ->capture_default_str();
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

}  // namespace cuslice::node
