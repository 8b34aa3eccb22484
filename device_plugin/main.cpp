// cuslice-device-plugin: the kubelet device plugin of cuslice. Pods ask for
// cuslice.io/gpu-memory (GiB) and cuslice.io/gpu-compute (percent of a GPU); each container
// becomes a tenant of the node's cuslice-scheduler with exactly that quota and share.
// docs/kubernetes.md says how to deploy it and what it enforces.
#include <signal.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "control_socket.h"
#include "device_plugin.h"
#include "logging.h"
#include "size.h"

namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) { g_stop.store(true); }

// Writes `text` to `path` unless it already holds it: a file the kubelet mounts into
// containers must not change under them without need.
bool write_if_changed(const std::string& path, const std::string& text, std::string& why) {
  std::ifstream in(path);
  const std::string current((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in && current == text) return true;
  const std::string temporary = path + ".new";
  std::ofstream out(temporary, std::ios::trunc);
  out << text;
  out.close();
  std::error_code ec;
  if (!out || (chmod(temporary.c_str(), 0644), std::filesystem::rename(temporary, path, ec), ec)) {
    why = "cannot write " + path + (ec ? ": " + ec.message() : "");
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  namespace dp = cuslice::device_plugin;
  CLI::App app{"cuslice-device-plugin: pods ask for cuslice.io/gpu-memory (GiB) and cuslice.io/gpu-compute "
               "(% of a GPU); each container becomes a cuslice-scheduler tenant with exactly that"};
  dp::PluginOptions options;
  std::string reserve = "0B";
  std::string level = "info";
  std::string target = "stderr";
  double poll_seconds = 1.0;
  double unseen_grace = 60.0;
  double removal_delay = 2.0;
  double kubelet_settle = 30.0;
  std::string preload_file = "/var/lib/cuslice/ld.so.preload";

  app.add_option("--plugin-dir", options.plugin_dir, "the kubelet's device plugin directory")->capture_default_str();
  app.add_option("--pod-resources-socket", options.pod_resources_socket, "the kubelet's PodResources API socket")
      ->capture_default_str();
  app.add_option("--scheduler-socket", options.scheduler_socket,
                 "cuslice-scheduler's socket; its directory is mounted into containers")
      ->capture_default_str();
  app.add_option("--scheduler-control-socket", options.scheduler_control_socket,
                 "cuslice-scheduler's control socket, where tenants are made; never in --scheduler-socket's "
                 "directory (default: the socket's name in <its directory>-control, e.g. " +
                     std::string(cuslice::wire::kDefaultControlSocketPath) + ")")
      ->type_name("PATH");
  app.add_option("--hook", options.response.hook_host_path, "libcuslice.so on the node, mounted into containers")
      ->required();
  app.add_option("--preload-file", preload_file,
                 "file the plugin writes, naming the hook, mounted as containers' /etc/ld.so.preload (empty: no "
                 "mount; then the image or pod must preload the hook)")
      ->capture_default_str();
  app.add_option("--shm-name", options.response.shm_name, "the scheduler's shared-memory segment")
      ->capture_default_str();
  app.add_option("--reserve-memory", reserve,
                 "memory per GPU never handed out (e.g. 2GiB): for tenants the plugin cannot count and for work "
                 "outside Kubernetes")
      ->capture_default_str();
  app.add_flag("--cap-compute", options.ledger.cap_compute,
               "a container's cuslice.io/gpu-compute is also its cap (default: a share it is guaranteed under "
               "contention, more when the GPU is free)");
  app.add_option("--nvidia-cdi-kind", options.response.cdi_kind,
                 "also name the GPU as a CDI device of this kind (e.g. nvidia.com/gpu, from nvidia-ctk cdi generate)");
  app.add_option("--dev-root", options.response.dev_root, "where the NVIDIA device nodes are")->capture_default_str();
  app.add_option("--poll-interval", poll_seconds, "seconds between looks at NVML, the scheduler and PodResources")
      ->check(CLI::Range(0.05, 60.0))
      ->capture_default_str();
  app.add_option("--unseen-grace", unseen_grace,
                 "seconds a tenant no pod was ever seen holding is kept (a pod that failed admission)")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  app.add_option("--removal-delay", removal_delay, "seconds a pod must be gone from PodResources before its tenant goes")
      ->check(CLI::Range(0.0, 600.0))
      ->capture_default_str();
  app.add_option("--kubelet-settle", kubelet_settle, "seconds after a kubelet restart during which no tenant is removed")
      ->check(CLI::Range(0.0, 600.0))
      ->capture_default_str();
  app.add_option("--log-level", level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_option("--log-target", target, "stderr, or journald")
      ->check(CLI::IsMember({"stderr", "journald"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  cuslice::configure_logging(target == "journald" ? cuslice::LogTarget::kJournald : cuslice::LogTarget::kStderr,
                             spdlog::level::from_str(level));
  std::string why;
  cuslice::SizeSpec size;
  const char* size_why = "";
  if (!cuslice::parse_size(reserve, size, &size_why) || size.kind != cuslice::SizeSpec::Kind::kBytes) {
    spdlog::error("--reserve-memory {}: {}", reserve,
                  size.kind == cuslice::SizeSpec::Kind::kPercent ? "give a size in bytes (e.g. 2GiB)" : size_why);
    return 2;
  }
  options.reserve_memory = size.bytes;
  options.poll = std::chrono::milliseconds(static_cast<int64_t>(poll_seconds * 1000));
  options.ledger.unseen_grace = std::chrono::milliseconds(static_cast<int64_t>(unseen_grace * 1000));
  options.ledger.removal_delay = std::chrono::milliseconds(static_cast<int64_t>(removal_delay * 1000));
  options.kubelet_settle = std::chrono::milliseconds(static_cast<int64_t>(kubelet_settle * 1000));
  if (options.response.shm_name.empty() || options.response.shm_name[0] != '/' ||
      options.response.shm_name.find('/', 1) != std::string::npos) {
    spdlog::error("--shm-name must be one '/' followed by a name, e.g. /cuslice");
    return 2;
  }
  options.response.socket_host_path = options.scheduler_socket;
  if (app.count("--scheduler-control-socket") == 0)
    options.scheduler_control_socket = cuslice::wire::default_control_socket(
        std::filesystem::absolute(options.scheduler_socket).string());
  if (options.scheduler_control_socket.empty()) {
    spdlog::error("--scheduler-socket {} has no directory beside which the control socket could be; give "
                  "--scheduler-control-socket",
                  options.scheduler_socket);
    return 2;
  }
  // Allocate mounts the socket's directory into every container.
  if (cuslice::wire::control_socket_exposed(options.scheduler_socket, options.scheduler_control_socket)) {
    spdlog::error("--scheduler-control-socket {} is in the directory of --scheduler-socket {} (or below it), which "
                  "every container is given",
                  options.scheduler_control_socket, options.scheduler_socket);
    return 2;
  }
  if (!std::filesystem::is_regular_file(options.response.hook_host_path)) {
    spdlog::error("--hook {}: no such file; containers would get no hook", options.response.hook_host_path);
    return 2;
  }
  if (!preload_file.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(preload_file).parent_path(), ec);
    if (!write_if_changed(preload_file, dp::preload_file_text(options.response), why)) {
      spdlog::error("--preload-file: {}", why);
      return 1;
    }
    options.response.preload_host_path = preload_file;
  }
  if (!std::filesystem::is_directory(options.plugin_dir)) {
    spdlog::error("--plugin-dir {}: no such directory (is this a Kubernetes node?)", options.plugin_dir);
    return 2;
  }

  std::unique_ptr<dp::GpuInventory> inventory = dp::GpuInventory::open(why);
  if (!inventory) {
    spdlog::error("{}", why);
    return 1;
  }
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);
  try {
    dp::DevicePlugin plugin(options, std::move(inventory));
    return plugin.run(g_stop);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}
