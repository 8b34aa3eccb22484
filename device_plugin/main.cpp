// cuslice-device-plugin: the kubelet device plugin of cuslice. Pods ask for
// cuslice.io/gpu-memory (GiB) and cuslice.io/gpu-compute (percent of a GPU); each container
// becomes a tenant of the node's cuslice-scheduler with exactly that quota and share.
// docs/reference/kubernetes.md says how to deploy it and what it enforces.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <filesystem>

#include "device_plugin/device_plugin.h"
#include "node/agent_options.h"
#include "node/stop_signal.h"

namespace {

namespace dp = cuslice::device_plugin;
namespace node = cuslice::node;

// The command line: the plugin's options, and what is given in other units or read before
// the plugin starts (logging, the file naming the hook).
struct CommandLine {
  dp::PluginOptions options;
  std::string reserve = "0B";
  node::LogOptions log;
  double poll_seconds = 1.0;
  double unseen_grace = 60.0;
  double removal_delay = 2.0;
  double kubelet_settle = 30.0;
  std::string preload_file = "/var/lib/cuslice/ld.so.preload";
  std::string placement = "binpack";
};

// Where the kubelet, the scheduler, the hook and the devices are, and what is handed out.
void add_node_options(CLI::App& app, CommandLine& c) {
  dp::PluginOptions& options = c.options;
  app.add_option("--plugin-dir", options.plugin_dir, "the kubelet's device plugin directory")->capture_default_str();
  app.add_option("--pod-resources-socket", options.pod_resources_socket, "the kubelet's PodResources API socket")
      ->capture_default_str();
  node::add_scheduler_options(app, options.response, options.scheduler_socket,
                                       options.scheduler_control_socket, c.preload_file);
  app.add_option("--reserve-memory", c.reserve,
                 "memory per GPU never handed out (e.g. 2GiB): for tenants the plugin cannot count and for work "
                 "outside Kubernetes")
      ->capture_default_str();
  app.add_option("--placement", c.placement,
                 "which GPU a container goes to, of those where its memory and compute fit: binpack (the fullest, "
                 "keeping whole GPUs free for large requests) or spread (the emptiest)")
      ->check(CLI::IsMember({"binpack", "spread"}))
      ->capture_default_str();
  app.add_flag("--cap-compute", options.ledger.cap_compute,
               "a container's cuslice.io/gpu-compute is also its cap (default: a share it is guaranteed under "
               "contention, more when the GPU is free)");
  app.add_option("--nvidia-cdi-kind", options.response.cdi_kind,
                 "also name the GPU as a CDI device of this kind (e.g. nvidia.com/gpu, from nvidia-ctk cdi generate)");
}

// How often the plugin looks, how long it waits before it removes a tenant, and its log.
void add_timing_options(CLI::App& app, CommandLine& c) {
  node::add_seconds_option(app, "--poll-interval", c.poll_seconds,
                           "seconds between looks at NVML, the scheduler and PodResources", 0.05, 60.0);
  node::add_seconds_option(app, "--unseen-grace", c.unseen_grace,
                           "seconds a tenant no pod was ever seen holding is kept (a pod that failed admission)", 1.0,
                           3600.0);
  node::add_seconds_option(app, "--removal-delay", c.removal_delay,
                           "seconds a pod must be gone from PodResources before its tenant goes", 0.0, 600.0);
  node::add_seconds_option(app, "--kubelet-settle", c.kubelet_settle,
                           "seconds after a kubelet restart during which no tenant is removed", 0.0, 600.0);
  node::add_log_options(app, c.log);
}

// --reserve-memory in bytes, and the durations given in seconds, into the plugin's options.
bool take_amounts(CommandLine& c) {
  std::string why;
  if (!node::bytes_of_option("--reserve-memory", c.reserve, c.options.reserve_memory, why)) {
    spdlog::error("{}", why);
    return false;
  }
  c.options.ledger.placement = *dp::parse_placement(c.placement);  // checked by the option
  c.options.poll = node::milliseconds_of(c.poll_seconds);
  c.options.ledger.unseen_grace = node::milliseconds_of(c.unseen_grace);
  c.options.ledger.removal_delay = node::milliseconds_of(c.removal_delay);
  c.options.kubelet_settle = node::milliseconds_of(c.kubelet_settle);
  return true;
}

// Checks the options and completes them (bytes, durations, default paths, the preload file).
// 0, or the exit status.
int finish_options(const CLI::App& app, CommandLine& c) {
  if (!take_amounts(c)) return 2;
  dp::PluginOptions& options = c.options;
  if (const int status = node::finish_scheduler_options(app, options.response, options.scheduler_socket,
                                                        options.scheduler_control_socket, c.preload_file);
      status != 0)
    return status;
  if (!std::filesystem::is_directory(c.options.plugin_dir)) {
    spdlog::error("--plugin-dir {}: no such directory (is this a Kubernetes node?)", c.options.plugin_dir);
    return 2;
  }
  return 0;
}

// Serves until SIGTERM or SIGINT. The exit status.
int serve(const dp::PluginOptions& options) {
  std::string why;
  std::unique_ptr<node::GpuInventory> inventory = node::GpuInventory::open(why);
  if (!inventory) {
    spdlog::error("{}", why);
    return 1;
  }
  const std::atomic<bool>& stop = node::stop_on_signals();
  try {
    dp::DevicePlugin plugin(options, std::move(inventory));
    return plugin.run(stop);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cuslice-device-plugin: pods ask for cuslice.io/gpu-memory (GiB) and cuslice.io/gpu-compute "
               "(% of a GPU); each container becomes a cuslice-scheduler tenant with exactly that"};
  CommandLine c;
  add_node_options(app, c);
  add_timing_options(app, c);
  if (const std::optional<int> status =
          node::start_agent(app, argc, argv, c.log, [&] { return finish_options(app, c); }))
    return *status;
  return serve(c.options);
}
