// cuslice-dra-plugin: cuslice's Kubernetes DRA driver (gpu.cuslice.io). It publishes the
// node's GPUs as one ResourceSlice whose devices several claims share by capacity (memory,
// compute), so that kube-scheduler places each claim on a GPU where its amounts fit; and, as a
// kubelet DRA plugin, makes each claim prepared on the node one cuslice-scheduler tenant with
// exactly the amounts allocated to it. docs/reference/kubernetes.md says how to deploy it.
//
// This file reads the options, wires the parts and runs them: the publisher's thread, the
// kubelet's sockets, and, every poll period, the control loop's look at the node
// (control_loop.h), until SIGTERM or SIGINT.
#include <curl/curl.h>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <thread>

#include "dra_plugin/api_client.h"
#include "dra_plugin/cdi_directory.h"
#include "dra_plugin/claim_preparer.h"
#include "dra_plugin/control_loop.h"
#include "dra_plugin/kube_config.h"
#include "dra_plugin/kubelet_services.h"
#include "dra_plugin/resource_slice.h"
#include "dra_plugin/slice_publisher.h"
#include "dra_plugin/socket_server.h"
#include "node/agent_options.h"
#include "node/gpu_inventory.h"
#include "node/scheduler_client.h"
#include "node/stop_signal.h"
#include "protocol/control_socket.h"

namespace {

namespace dra = cuslice::dra;
namespace node = cuslice::node;
using Clock = std::chrono::steady_clock;

struct CommandLine {
  dra::PreparerOptions preparer;
  std::string kubeconfig;
  std::string service_account_dir = dra::kServiceAccountDir;
  std::string plugin_dir = "/var/lib/kubelet/plugins/gpu.cuslice.io";
  std::string registry_dir = "/var/lib/kubelet/plugins_registry";
  std::string scheduler_socket = cuslice::wire::kDefaultSocketPath;
  std::string scheduler_control_socket = cuslice::wire::kDefaultControlSocketPath;
  std::string preload_file = "/var/lib/cuslice/ld.so.preload";
  std::string reserve = "0B";
  std::string step = "256MiB";
  double poll_seconds = 5.0;
  double scheduler_grace = 10.0;
  double backoff_max = 30.0;
  double resync = 300.0;
  node::LogOptions log;
};

// Where the API server, the kubelet, the scheduler and the hook are.
void add_node_options(CLI::App& app, CommandLine& c) {
  dra::PreparerOptions& p = c.preparer;
  const char* node_env = std::getenv("NODE_NAME");
  p.slice.node = node_env ? node_env : "";
  app.add_option("--node-name", p.slice.node, "this node's name (default: $NODE_NAME)");
  app.add_option("--kubeconfig", c.kubeconfig,
                 "kubeconfig file to reach the API server with (default: the pod's service account)");
  app.add_option("--service-account-dir", c.service_account_dir, "where a pod's service account token and CA are")
      ->capture_default_str();
  app.add_option("--plugin-dir", c.plugin_dir, "where the plugin's socket (dra.sock) and checkpoint go")
      ->capture_default_str();
  app.add_option("--registry-dir", c.registry_dir, "the kubelet's plugin registration directory")
      ->capture_default_str();
  app.add_option("--cdi-dir", p.cdi_dir, "where the claims' CDI specs are written")->capture_default_str();
  node::add_scheduler_options(app, p.mounts, c.scheduler_socket, c.scheduler_control_socket, c.preload_file);
}

// What claims are given, how often the driver looks and tries again, and its log.
void add_service_options(CLI::App& app, CommandLine& c) {
  dra::PreparerOptions& p = c.preparer;
  app.add_option("--reserve-memory", c.reserve, "memory per GPU never handed out (e.g. 2GiB)")->capture_default_str();
  app.add_option("--memory-step", c.step, "claims take memory in multiples of this (at least 1MiB)")
      ->capture_default_str();
  app.add_flag("--cap-compute", p.cap_compute,
               "a claim's compute is also its cap (default: a share it is guaranteed, more when the GPU is free)");
  node::add_seconds_option(app, "--poll-interval", c.poll_seconds, "seconds between looks at NVML and the scheduler",
                           0.05, 60.0);
  node::add_seconds_option(app, "--scheduler-grace", c.scheduler_grace,
                           "seconds the scheduler may not answer before the slice lists no GPU", 0.0, 600.0);
  node::add_seconds_option(app, "--backoff-max", c.backoff_max,
                           "the longest wait, in seconds, between tries at the API server", 0.1, 600.0);
  node::add_seconds_option(app, "--resync", c.resync, "seconds a watch of the slice runs before it is read again",
                           1.0, 3600.0);
  node::add_log_options(app, c.log);
}

// --node-name, --reserve-memory and --memory-step; 0, or the exit status.
int finish_slice_options(CommandLine& c) {
  dra::SliceOptions& slice = c.preparer.slice;
  if (slice.node.empty()) {
    spdlog::error("--node-name is empty and NODE_NAME is not set (the DaemonSet sets it from spec.nodeName)");
    return 2;
  }
  std::string why;
  if (!node::bytes_of_option("--reserve-memory", c.reserve, slice.reserve_memory, why) ||
      !node::bytes_of_option("--memory-step", c.step, slice.memory_step, why)) {
    spdlog::error("{}", why);
    return 2;
  }
  if (slice.memory_step < (uint64_t{1} << 20)) {
    spdlog::error("--memory-step {}: at least 1MiB", c.step);
    return 2;
  }
  return 0;
}

// Checks and completes the options; 0, or the exit status.
int finish_options(const CLI::App& app, CommandLine& c) {
  dra::PreparerOptions& p = c.preparer;
  if (const int status = finish_slice_options(c); status != 0) return status;
  if (const int status = node::finish_scheduler_options(app, p.mounts, c.scheduler_socket,
                                                        c.scheduler_control_socket, c.preload_file);
      status != 0)
    return status;
  for (const std::string& dir : {c.plugin_dir, c.registry_dir}) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (!std::filesystem::is_directory(dir)) {
      spdlog::error("cannot make directory {}: {}", dir, ec.message());
      return 1;
    }
  }
  if (const std::string why = dra::prepare_cdi_dir(p.cdi_dir); !why.empty()) {
    spdlog::error("{}", why);
    return 1;
  }
  p.checkpoint_path = c.plugin_dir + "/checkpoint.json";
  return 0;
}

dra::PublisherTiming publisher_timing(const CommandLine& c) {
  dra::PublisherTiming timing;
  timing.backoff_max = std::max(timing.backoff_min, node::milliseconds_of(c.backoff_max));
  timing.backoff_min = std::min(timing.backoff_min, timing.backoff_max);
  timing.resync = std::chrono::seconds(static_cast<int64_t>(c.resync));
  return timing;
}

// The kubelet's two sockets, served until `stop`, while the control loop looks every poll
// period. The registration socket is served again when the kubelet's cleanup removed it.
class KubeletSockets {
 public:
  KubeletSockets(const CommandLine& c, dra::ClaimPreparer& preparer)
      : endpoint_(c.plugin_dir + "/dra.sock"),
        registration_(c.registry_dir + "/" + dra::kDriverName + "-reg.sock"),
        v1_(preparer),
        v1beta1_(preparer),
        registrar_(endpoint_) {}

  void serve(dra::ControlLoop& loop, std::chrono::milliseconds poll, const std::atomic<bool>& stop) {
    // The plugin socket serves before the kubelet can find the registration socket.
    dra::SocketServer plugin_server(endpoint_, {&v1_, &v1beta1_});
    auto registration_server = serve_registration();
    spdlog::info("serving {} on {}, registered through {}", dra::kDriverName, endpoint_, registration_);
    while (!stop) {
      const Clock::time_point looked = loop.look();
      if (!registration_server->present()) {
        spdlog::info("the registration socket is gone (the kubelet cleaned its directory): serving it again");
        registration_server.reset();
        registration_server = serve_registration();
      }
      for (auto until = looked + poll; !stop && Clock::now() < until;)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    registration_server.reset();  // the kubelet stops calling once this socket is gone
  }

 private:
  std::unique_ptr<dra::SocketServer> serve_registration() {
    return std::make_unique<dra::SocketServer>(registration_, std::vector<grpc::Service*>{&registrar_});
  }

  const std::string endpoint_;
  const std::string registration_;
  dra::DraServiceV1 v1_;
  dra::DraServiceV1beta1 v1beta1_;
  dra::RegistrationService registrar_;
};

// The publisher's thread and the kubelet's sockets, until `stop`; the exit status.
int run(const CommandLine& c, dra::ClaimPreparer& preparer, dra::SlicePublisher& publisher, dra::ControlLoop& loop,
        std::atomic<bool>& stop) {
  KubeletSockets sockets(c, preparer);
  std::thread publishing;
  int status = 0;
  try {
    publishing = std::thread([&] { publisher.run(stop); });
    sockets.serve(loop, node::milliseconds_of(c.poll_seconds), stop);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    stop = true;
    status = 1;
  }
  if (publishing.joinable()) publishing.join();
  return status;
}

int serve(const CommandLine& c, const dra::KubeConfig& kube, std::atomic<bool>& stop) {
  std::string why;
  std::unique_ptr<node::GpuInventory> inventory = node::GpuInventory::open(why);
  if (!inventory) {
    spdlog::error("{}", why);
    return 1;
  }
  dra::PreparerOptions options = c.preparer;
  options.slice.driver_version = inventory->driver_version();
  const dra::ApiClient api(kube);
  const node::SchedulerClient scheduler(c.scheduler_control_socket);
  dra::ClaimPreparer preparer(options, api, scheduler);
  if (!preparer.load(why)) {
    spdlog::error("{}", why);
    return 1;
  }
  dra::SlicePublisher publisher(api, dra::slice_name(options.slice.node), options.slice.node, publisher_timing(c));
  dra::ControlLoop loop(*inventory, scheduler, preparer, publisher, options.slice, c.scheduler_grace);
  loop.first_look();
  return run(c, preparer, publisher, loop, stop);
}

// Finds the API server (--kubeconfig, else the pod's service account) and serves until
// SIGTERM or SIGINT. The exit status.
int serve_cluster(const CommandLine& c) {
  std::string why;
  const std::optional<dra::KubeConfig> kube = c.kubeconfig.empty() ? dra::in_cluster_config(c.service_account_dir, why)
                                                                   : dra::load_kubeconfig(c.kubeconfig, why);
  if (!kube) {
    spdlog::error("{}", why);
    return 2;
  }
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    spdlog::error("cannot initialise libcurl");
    return 1;
  }
  std::atomic<bool>& stop = node::stop_on_signals();
  const int status = serve(c, *kube, stop);
  curl_global_cleanup();
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  CommandLine c;
  CLI::App app{"cuslice-dra-plugin: the Kubernetes DRA driver gpu.cuslice.io; each claim prepared on this node "
               "becomes a cuslice-scheduler tenant with exactly the GPU memory and compute it was allocated"};
  add_node_options(app, c);
  add_service_options(app, c);
  const std::optional<int> status = node::start_agent(app, argc, argv, c.log, [&] { return finish_options(app, c); });
  return status ? *status : serve_cluster(c);
}
