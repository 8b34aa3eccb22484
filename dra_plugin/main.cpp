// cuslice-dra-plugin: cuslice's Kubernetes DRA driver (gpu.cuslice.io). It publishes the
// node's GPUs as one ResourceSlice whose devices several claims share by capacity (memory,
// compute), so that kube-scheduler places each claim on a GPU where its amounts fit; and, as a
// kubelet DRA plugin, makes each claim prepared on the node one cuslice-scheduler tenant with
// exactly the amounts allocated to it. docs/kubernetes.md says how to deploy it.
//
// This file wires the parts and runs the control loop: every poll period it reads the GPUs
// (NVML) and the scheduler's tenants, makes lost tenants again (ClaimPreparer::reconcile),
// and hands the publisher the slice to keep on the API server: the present GPUs while the
// scheduler answers, none once it has not answered for --scheduler-grace (nothing placed
// here could be enforced).
#include <curl/curl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <thread>

#include "common/logging.h"
#include "dra_plugin/api_client.h"
#include "dra_plugin/claim_preparer.h"
#include "dra_plugin/kube_config.h"
#include "dra_plugin/kubelet_services.h"
#include "dra_plugin/resource_slice.h"
#include "dra_plugin/slice_publisher.h"
#include "node/agent_options.h"
#include "node/gpu_inventory.h"
#include "node/scheduler_client.h"
#include "protocol/control_socket.h"

namespace {

namespace dra = cuslice::dra;
namespace node = cuslice::node;
using Clock = std::chrono::steady_clock;

std::atomic<bool> g_stop{false};

void on_signal(int) { g_stop.store(true); }

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
  std::string level = "info";
  std::string target = "stderr";
};

void add_options(CLI::App& app, CommandLine& c) {
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
  app.add_option("--reserve-memory", c.reserve, "memory per GPU never handed out (e.g. 2GiB)")->capture_default_str();
  app.add_option("--memory-step", c.step, "claims take memory in multiples of this (at least 1MiB)")
      ->capture_default_str();
  app.add_flag("--cap-compute", p.cap_compute,
               "a claim's compute is also its cap (default: a share it is guaranteed, more when the GPU is free)");
  app.add_option("--poll-interval", c.poll_seconds, "seconds between looks at NVML and the scheduler")
      ->check(CLI::Range(0.05, 60.0))
      ->capture_default_str();
  app.add_option("--scheduler-grace", c.scheduler_grace,
                 "seconds the scheduler may not answer before the slice lists no GPU")
      ->check(CLI::Range(0.0, 600.0))
      ->capture_default_str();
  app.add_option("--backoff-max", c.backoff_max, "the longest wait, in seconds, between tries at the API server")
      ->check(CLI::Range(0.1, 600.0))
      ->capture_default_str();
  app.add_option("--resync", c.resync, "seconds a watch of the slice runs before it is read again")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  node::add_log_options(app, c.level, c.target);
}

// Checks and completes the options; 0, or the exit status.
int finish_options(const CLI::App& app, CommandLine& c) {
  dra::PreparerOptions& p = c.preparer;
  if (p.slice.node.empty()) {
    spdlog::error("--node-name is empty and NODE_NAME is not set (the DaemonSet sets it from spec.nodeName)");
    return 2;
  }
  std::string why;
  if (!node::bytes_of_option("--reserve-memory", c.reserve, p.slice.reserve_memory, why) ||
      !node::bytes_of_option("--memory-step", c.step, p.slice.memory_step, why)) {
    spdlog::error("{}", why);
    return 2;
  }
  if (p.slice.memory_step < (uint64_t{1} << 20)) {
    spdlog::error("--memory-step {}: at least 1MiB", c.step);
    return 2;
  }
  if (const std::string why = cuslice::settle_scheduler_paths(
          p.mounts, c.scheduler_socket, app.count("--scheduler-control-socket") > 0, c.scheduler_control_socket);
      !why.empty()) {
    spdlog::error("{}", why);
    return 2;
  }
  if (const int status = cuslice::provide_hook(p.mounts, c.preload_file, why); status != 0) {
    spdlog::error("{}", why);
    return status;
  }
  for (const std::string& dir : {c.plugin_dir, c.registry_dir, p.cdi_dir}) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (!std::filesystem::is_directory(dir)) {
      spdlog::error("cannot make directory {}: {}", dir, ec.message());
      return 1;
    }
  }
  p.checkpoint_path = c.plugin_dir + "/checkpoint.json";
  return 0;
}

// A gRPC server on a Unix socket; the socket file goes with it.
class SocketServer {
 public:
  SocketServer(const std::string& path, std::vector<grpc::Service*> services) : path_(path) {
    unlink(path_.c_str());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + path_, grpc::InsecureServerCredentials());
    for (grpc::Service* s : services) builder.RegisterService(s);
    server_ = builder.BuildAndStart();
    if (!server_) throw std::runtime_error("cannot serve on " + path_);
    struct stat st {};
    if (stat(path_.c_str(), &st) == 0) inode_ = st.st_ino;
  }
  ~SocketServer() {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_->Wait();
    if (present()) unlink(path_.c_str());
  }
  // The socket file is still the one this server made (the kubelet's cleanup removes sockets).
  bool present() const {
    struct stat st {};
    return stat(path_.c_str(), &st) == 0 && st.st_ino == inode_;
  }

 private:
  std::string path_;
  ino_t inode_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// Says which GPUs left NVML's list since the last look (they leave the slice) and which came
// back (they are listed again), with what NVML said of those that went.
void log_gpu_changes(const std::vector<node::GpuInfo>& before, const std::vector<node::GpuInfo>& now,
                     const std::vector<std::string>& problems) {
  const auto listed = [](const std::vector<node::GpuInfo>& list, const node::GpuInfo& g) {
    return std::any_of(list.begin(), list.end(), [&](const node::GpuInfo& x) { return x.uuid == g.uuid; });
  };
  for (const node::GpuInfo& g : before)
    if (!listed(now, g))
      spdlog::warn("GPU {} ({}) does not answer NVML ({}): it leaves the slice until it does", g.index, g.uuid,
                   problems.empty() ? std::string("no longer listed") : fmt::format("{}", fmt::join(problems, "; ")));
  for (const node::GpuInfo& g : now)
    if (!listed(before, g)) spdlog::info("GPU {} ({}) is back: the slice lists it again", g.index, g.uuid);
}

std::chrono::milliseconds milliseconds(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

int serve(const CommandLine& c, const dra::KubeConfig& kube) {
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
  dra::PublisherTiming timing;
  timing.backoff_max = std::max(timing.backoff_min, milliseconds(c.backoff_max));
  timing.backoff_min = std::min(timing.backoff_min, timing.backoff_max);
  timing.resync = std::chrono::seconds(static_cast<int64_t>(c.resync));
  dra::SlicePublisher publisher(api, dra::slice_name(options.slice.node), options.slice.node, timing);
  // The GPUs before the kubelet can call: a claim is prepared on the GPUs NVML reports.
  std::vector<std::string> problems;
  std::vector<node::GpuInfo> listed = inventory->list(problems).value_or(std::vector<node::GpuInfo>{});
  for (const std::string& p : problems) spdlog::warn("NVML: {}", p);
  preparer.set_gpus(listed);

  const std::string endpoint = c.plugin_dir + "/dra.sock";
  const std::string registration = c.registry_dir + "/" + dra::kDriverName + "-reg.sock";
  dra::DraServiceV1 v1(preparer);
  dra::DraServiceV1beta1 v1beta1(preparer);
  dra::RegistrationService registrar(endpoint);
  std::thread publishing;
  try {
    // The plugin socket serves before the kubelet can find the registration socket.
    SocketServer plugin_server(endpoint, {&v1, &v1beta1});
    auto registration_server = std::make_unique<SocketServer>(registration, std::vector<grpc::Service*>{&registrar});
    publishing = std::thread([&] { publisher.run(g_stop); });
    spdlog::info("serving {} on {}, registered through {}", dra::kDriverName, endpoint, registration);

    bool scheduler_silent = false;
    Clock::time_point silent_since;
    uint64_t generation = 0;
    while (!g_stop) {
      problems.clear();
      std::vector<node::GpuInfo> gpus = inventory->list(problems).value_or(std::vector<node::GpuInfo>{});
      for (const std::string& p : problems) spdlog::debug("NVML: {}", p);
      log_gpu_changes(listed, gpus, problems);
      listed = gpus;
      preparer.set_gpus(gpus);
      const std::optional<node::SchedulerState> state = scheduler.state(why);
      const Clock::time_point now = Clock::now();
      if (state) {
        if (scheduler_silent) spdlog::info("the scheduler answers again");
        scheduler_silent = false;
        if (state->generation != generation) spdlog::info("scheduler (pid {}) found", state->pid);
        generation = state->generation;
        preparer.reconcile(*state);
      } else if (!scheduler_silent) {
        spdlog::warn("{}; the slice lists no GPU after {} s of this", why, c.scheduler_grace);
        scheduler_silent = true;
        silent_since = now;
      }
      const bool enforceable = !scheduler_silent || now - silent_since < milliseconds(c.scheduler_grace);
      publisher.set(dra::slice_spec(options.slice, enforceable ? gpus : std::vector<node::GpuInfo>{}, 0));
      if (!registration_server->present()) {
        spdlog::info("the registration socket is gone (the kubelet cleaned its directory): serving it again");
        registration_server.reset();
        registration_server = std::make_unique<SocketServer>(registration, std::vector<grpc::Service*>{&registrar});
      }
      for (auto until = now + milliseconds(c.poll_seconds); !g_stop && Clock::now() < until;)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    registration_server.reset();  // the kubelet stops calling once this socket is gone
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    g_stop = true;
    if (publishing.joinable()) publishing.join();
    return 1;
  }
  if (publishing.joinable()) publishing.join();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cuslice-dra-plugin: the Kubernetes DRA driver gpu.cuslice.io; each claim prepared on this node "
               "becomes a cuslice-scheduler tenant with exactly the GPU memory and compute it was allocated"};
  CommandLine c;
  add_options(app, c);
  CLI11_PARSE(app, argc, argv);
  cuslice::configure_logging(c.target == "journald" ? cuslice::LogTarget::kJournald : cuslice::LogTarget::kStderr,
                             spdlog::level::from_str(c.level));
  if (const int status = finish_options(app, c); status != 0) return status;
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
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);
  const int status = serve(c, *kube);
  curl_global_cleanup();
  return status;
}
