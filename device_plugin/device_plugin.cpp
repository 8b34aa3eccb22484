#include "device_plugin/device_plugin.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "device_plugin/device_ids.h"
#include "device_plugin/pod_resources.h"
#include "node/random_hex.h"
#include "protocol/ppm.h"

namespace cuslice::device_plugin {
namespace {

constexpr const char* kMemoryEndpoint = "cuslice-gpu-memory.sock";
constexpr const char* kComputeEndpoint = "cuslice-gpu-compute.sock";
constexpr const char* kTenantPrefix = "k8s-";

using node::random_hex;

template <size_t N>
void copy(char (&to)[N], const std::string& from) {
  std::memset(to, 0, N);
  std::strncpy(to, from.c_str(), N - 1);
}

template <size_t N>
std::string text(const char (&field)[N]) {
  return std::string(field, strnlen(field, N));
}

Allocation from_wire(const wire::PluginTenant& t, Clock::time_point now) {
  Allocation a;
  a.tenant = text(t.name);
  a.key = text(t.key);
  a.gpu = t.gpu;
  a.gpu_uuid = text(t.gpu_uuid);
  for (uint32_t u = 0; u < wire::kMaxPluginUnits; ++u)
    if (t.units[u / 64] & (uint64_t{1} << (u % 64))) a.units.insert(u);
  a.workload = {text(t.pod_namespace), text(t.pod_name), text(t.container_name)};
  // Linked before the restart: the container was seen; otherwise it has the grace again.
  a.seen = !a.workload.empty();
  a.created = now;
  return a;
}

}  // namespace

const char* resource_name(Resource resource) {
  return resource == Resource::kMemory ? kMemoryResource : kComputeResource;
}

DevicePlugin::DevicePlugin(PluginOptions options, std::unique_ptr<node::GpuInventory> inventory)
    : options_(std::move(options)),
      inventory_(std::move(inventory)),
      scheduler_(options_.scheduler_control_socket),
      ledger_(options_.ledger) {}

DevicePlugin::~DevicePlugin() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    cv_.notify_all();
  }
  memory_endpoint_.reset();
  compute_endpoint_.reset();
}

void DevicePlugin::changed() {
  ++version_;
  cv_.notify_all();
}

bool DevicePlugin::devices(Resource resource, std::vector<Device>& out, uint64_t& version) {
  std::lock_guard lock(mutex_);
  if (stopping_) return false;
  out = resource == Resource::kMemory ? ledger_.memory_devices() : ledger_.compute_devices();
  version = version_;
  return true;
}

void DevicePlugin::wait_for_change(uint64_t seen, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  cv_.wait_for(lock, timeout, [&] { return stopping_ || version_ != seen; });
}

std::vector<std::string> DevicePlugin::preferred(Resource resource, const std::vector<std::string>& available,
                                                 const std::vector<std::string>& must_include, size_t size) {
  if (resource == Resource::kCompute) {
    std::lock_guard lock(mutex_);
    return ledger_.preferred_compute(available, must_include, size);
  }
  // Whose the compute call just before was: PodResources has recorded it by now
  // (call_pairing.h, rule 3). Asked without the mutex, as every call to the kubelet.
  bool ask;
  {
    std::lock_guard lock(mutex_);
    ask = ledger_.pairing_needs_pods(Clock::now());
  }
  std::optional<std::vector<Holding>> holdings;
  const Clock::time_point listed = Clock::now();
  std::string why;
  if (ask) holdings = list_holdings(options_.pod_resources_socket, why);
  if (ask && !holdings) spdlog::debug("GetPreferredAllocation: {}; the calls' order decides", why);
  std::lock_guard lock(mutex_);
  if (holdings) ledger_.settle_pairing(*holdings, listed);
  return ledger_.preferred_memory(available, must_include, size, Clock::now());
}

wire::PluginTenant DevicePlugin::to_wire(const Allocation& a) const {
  wire::PluginTenant t;
  copy(t.name, a.tenant);
  copy(t.key, a.key);
  t.gpu = a.gpu;
  t.priority = 1;
  t.share_ppm = ledger_.share_ppm(a);
  t.limit_ppm = ledger_.limit_ppm(a);
  t.memory_bytes = a.memory_bytes();
  copy(t.gpu_uuid, a.gpu_uuid);
  for (uint32_t u : a.units)
    if (u < wire::kMaxPluginUnits) t.units[u / 64] |= uint64_t{1} << (u % 64);
  copy(t.pod_namespace, a.workload.pod_namespace);
  copy(t.pod_name, a.workload.pod_name);
  copy(t.container_name, a.workload.container_name);
  return t;
}

bool DevicePlugin::allocate(Resource resource, const std::vector<std::string>& ids,
                            v1beta1::ContainerAllocateResponse& out, std::string& error) {
  std::lock_guard lock(mutex_);
  if (resource == Resource::kCompute) {
    error = ledger_.allocate_compute(ids, Clock::now());
    if (!error.empty()) return false;
    out = compute_response(ids.size());
    changed();  // compute paired with a tenant is promised on its GPU now
    return true;
  }
  if (!ledger_.scheduler_reachable()) {
    error = fmt::format("{}: cuslice-scheduler does not answer on {}, so the container's tenant cannot be made",
                        kMemoryResource, scheduler_.socket_path());
    return false;
  }
  const std::string name = kTenantPrefix + random_hex(12);
  const Ledger::MemoryOutcome outcome = ledger_.allocate_memory(ids, Clock::now(), name, random_hex(32));
  if (!outcome.allocation) {
    error = outcome.error;
    return false;
  }
  const Allocation& a = *outcome.allocation;
  if (outcome.created) {
    push_changes(Clock::now(), a.tenant);  // the others' shares that shrink go first
    const wire::PluginTenant spec = to_wire(a);
    const node::SchedulerAnswer answer = scheduler_.apply(spec);
    if (!answer.ok()) {
      error = fmt::format("{}: cuslice-scheduler refused the tenant for {} on GPU {}: {}", kMemoryResource,
                          gib_text(a.memory_bytes()), a.gpu, answer.message);
      ledger_.forget(name);
      changed();
      return false;
    }
    in_scheduler_[a.tenant] = spec;
    spdlog::info("tenant {}: {} on GPU {} ({}), share {:g}%", a.tenant, gib_text(a.memory_bytes()), a.gpu,
                 a.gpu_uuid, ppm_to_percent(spec.share_ppm));
    changed();
  }
  out = memory_response(a, minors_.count(a.gpu) ? minors_.at(a.gpu) : std::nullopt, options_.response);
  return true;
}

bool DevicePlugin::pre_start(Resource resource, const std::vector<std::string>& ids, std::string& error) {
  if (resource != Resource::kCompute) return true;
  const Clock::time_point asked = Clock::now();
  std::string why;
  const std::optional<std::vector<Holding>> holdings = list_holdings(options_.pod_resources_socket, why);
  std::lock_guard lock(mutex_);
  if (!holdings) {
    // Nothing can be checked; the next look at PodResources links the container.
    spdlog::warn("PreStartContainer for {} IDs of {}: {}; the container starts unchecked", ids.size(),
                 kComputeResource, why);
    return true;
  }
  const StartOutcome outcome = ledger_.start_compute(ids, *holdings, asked);
  error = outcome.error;
  if (error.empty() && !outcome.tenant.empty() && ledger_.scheduler_reachable()) {
    // The share before the container's first kernel, the others' shrinking ones first. The
    // scheduler counts the GPU's other tenants too (its configuration file's), which the
    // plugin does not see: a share it refuses is the container's refusal.
    push_changes(Clock::now(), outcome.tenant);
    const Allocation& a = ledger_.allocations().at(outcome.tenant);
    if (const std::string refused = apply(a, "at its start"); !refused.empty()) {
      error = fmt::format("{}: container {} asks for {}% of GPU {}, and cuslice-scheduler refused it: {}",
                          kComputeResource, a.workload.text(), a.compute_percent, a.gpu, refused);
      ledger_.refuse_compute(outcome.tenant);
    }
  }
  changed();
  return error.empty();
}

void DevicePlugin::refresh_gpus() {
  std::vector<std::string> problems;
  std::optional<std::vector<node::GpuInfo>> found = inventory_->list(problems);
  const std::string problem = fmt::format("{}", fmt::join(problems, "; "));
  if (problem != last_gpu_problem_ && !problem.empty()) spdlog::warn("NVML: {}", problem);
  last_gpu_problem_ = problem;
  if (!found) return;  // keep what is known; the GPUs are unchanged as far as anyone can tell
  std::vector<Gpu> gpus;
  for (const node::GpuInfo& g : *found) gpus.push_back({g.index, g.uuid, g.memory_total, 0, true});
  std::lock_guard lock(mutex_);
  const auto before = ledger_.memory_devices();
  for (const node::GpuInfo& g : *found) minors_[g.index] = g.minor;
  for (const Gpu& known : ledger_.gpus()) {
    const bool present = std::any_of(gpus.begin(), gpus.end(), [&](const Gpu& g) { return g.uuid == known.uuid; });
    if (known.present && !present) spdlog::warn("GPU {} ({}) is gone: its devices are unhealthy", known.index, known.uuid);
    if (!known.present && present) spdlog::info("GPU {} ({}) is back", known.index, known.uuid);
  }
  ledger_.set_gpus(gpus);
  if (ledger_.memory_devices() != before) changed();
}

std::string DevicePlugin::apply(const Allocation& a, const char* why) {
  const wire::PluginTenant spec = to_wire(a);
  auto it = in_scheduler_.find(a.tenant);
  if (it != in_scheduler_.end() && std::memcmp(&it->second, &spec, sizeof spec) == 0) return {};
  const node::SchedulerAnswer answer = scheduler_.apply(spec);
  if (!answer.ok()) {
    spdlog::warn("tenant {}: the scheduler refused an update: {}", a.tenant, answer.message);
    return answer.message;
  }
  if (it == in_scheduler_.end()) spdlog::info("tenant {}: created again in the scheduler ({})", a.tenant, why);
  in_scheduler_[a.tenant] = spec;
  return {};
}

void DevicePlugin::push_changes(Clock::time_point made_before, const std::string& skip) {
  std::vector<std::pair<int64_t, const Allocation*>> due;
  for (const auto& [name, a] : ledger_.allocations()) {
    if (a.tenant.empty() || a.created > made_before || name == skip) continue;
    const auto it = in_scheduler_.find(a.tenant);
    const int64_t before = it == in_scheduler_.end() ? 0 : int64_t{it->second.share_ppm};
    due.push_back({int64_t{ledger_.share_ppm(a)} - before, &a});
  }
  std::stable_sort(due.begin(), due.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  for (const auto& [growth, a] : due) apply(*a, "the scheduler restarted, or lost it");
}

void DevicePlugin::sync_scheduler_and_pods() {
  std::string why;
  // Tenants made after this moment are not in the answer yet, and not lost.
  const Clock::time_point asked = Clock::now();
  std::optional<node::SchedulerState> state = scheduler_.state(why);
  std::string pods_why;
  const std::optional<FileIdentity> pod_socket = socket_identity(options_.pod_resources_socket);
  // PodResources is as of this moment (reconcile() keeps compute paired since).
  const Clock::time_point now = Clock::now();
  std::optional<std::vector<Holding>> holdings = list_holdings(options_.pod_resources_socket, pods_why);

  std::lock_guard lock(mutex_);
  const bool first = !scheduler_checked_;
  scheduler_checked_ = true;
  follow_scheduler(state, why, first, now);
  follow_pods(holdings, pods_why, pod_socket, now);
  tell_scheduler(asked);
}

// 2. The scheduler.
void DevicePlugin::follow_scheduler(const std::optional<node::SchedulerState>& state, const std::string& why, bool first,
                                    Clock::time_point now) {
  if (!state) {
    if (ledger_.scheduler_reachable() || first) {
      spdlog::warn("cuslice-scheduler: {}; every device is unhealthy until it answers", why);
      ledger_.set_scheduler_reachable(false);
      changed();
    }
    in_scheduler_.clear();
    return;
  }
  if (!ledger_.scheduler_reachable()) {
    spdlog::info("cuslice-scheduler answers on {} (pid {})", scheduler_.socket_path(), state->pid);
    ledger_.set_scheduler_reachable(true);
    changed();
  }
  hold_back_for_other_tenants(*state);
  take_back_plugin_tenants(*state, now);
}

// The memory of the scheduler's other tenants (and --reserve-memory) is not handed out.
void DevicePlugin::hold_back_for_other_tenants(const node::SchedulerState& state) {
  const auto before = ledger_.memory_devices();
  for (const Gpu& g : ledger_.gpus()) {
    uint64_t held = options_.reserve_memory;
    for (const node::OtherTenant& t : state.other_tenants) {
      if (t.memory_bytes) held += *t.memory_bytes;
      else if (t.memory_ppm) held += ppm_of_bytes(g.memory_total, *t.memory_ppm);
    }
    ledger_.set_held_back(g.index, held);
  }
  ledger_.set_other_tenants(state.other_tenant_count);
  for (const node::OtherTenant& t : state.other_tenants)
    if (t.unlimited() && warned_unlimited_.insert(t.name).second)
      spdlog::warn("the scheduler's tenant {} has no memory quota: the plugin cannot count its memory; give it one "
                   "(or keep it back with --reserve-memory)",
                   t.name);
  if (ledger_.memory_devices() != before) changed();
}

// The scheduler's plugin tenants, as it lists them; those the ledger does not know (the plugin
// restarted) are taken back.
void DevicePlugin::take_back_plugin_tenants(const node::SchedulerState& state, Clock::time_point now) {
  in_scheduler_.clear();
  for (const wire::PluginTenant& t : state.plugin_tenants) {
    const std::string name = text(t.name);
    in_scheduler_[name] = t;
    if (!ledger_.allocations().count(name)) {
      Allocation a = from_wire(t, now);
      spdlog::info("tenant {}: taken back from the scheduler ({} on GPU {}{})", name, gib_text(a.memory_bytes()),
                   a.gpu, a.workload.empty() ? "" : ", " + a.workload.text());
      ledger_.restore(std::move(a));
      changed();
    }
  }
}

// 3. The pods.
void DevicePlugin::follow_pods(const std::optional<std::vector<Holding>>& holdings, const std::string& why,
                               const std::optional<FileIdentity>& pod_socket, Clock::time_point now) {
  if (!holdings) {
    if (why != last_pods_problem_) spdlog::warn("{}; tenants are kept until it answers", why);
    last_pods_problem_ = why;
    return;
  }
  if (!last_pods_problem_.empty()) spdlog::info("the kubelet's PodResources API answers again");
  last_pods_problem_.clear();
  if (pod_socket != pod_resources_identity_) {
    // A kubelet that just started lists pods only once it has synced them.
    if (pod_resources_identity_) removals_allowed_from_ = now + options_.kubelet_settle;
    pod_resources_identity_ = pod_socket;
  }
  spdlog::debug("PodResources: {} containers hold our devices", holdings->size());
  const auto before = ledger_.memory_devices();
  Ledger::ReconcileResult result = ledger_.reconcile(*holdings, now, now >= removals_allowed_from_);
  for (const std::string& w : result.warnings) spdlog::warn("{}", w);
  for (const Allocation& a : result.removed) {
    if (a.tenant.empty()) continue;
    spdlog::info("tenant {}: {} gone, {} back on GPU {}", a.tenant,
                 a.workload.empty() ? "its pod never started, so" : a.workload.text(), gib_text(a.memory_bytes()),
                 a.gpu);
    pending_removals_.push_back(a.tenant);
  }
  // Tenants gone, or compute now known to be promised on a GPU.
  if (!result.removed.empty() || ledger_.memory_devices() != before) changed();
}

// 4. What the scheduler must learn: the tenants removed, and those it lost or never got
// (`asked`: when its list was asked for; tenants made since may be missing from it).
void DevicePlugin::tell_scheduler(Clock::time_point asked) {
  if (!ledger_.scheduler_reachable()) return;
  std::vector<std::string> still;
  for (const std::string& name : pending_removals_) {
    const node::SchedulerAnswer answer = scheduler_.remove(name);
    if (answer.kind == node::SchedulerAnswer::Kind::kUnreachable) still.push_back(name);
    else if (!answer.ok()) spdlog::warn("tenant {}: the scheduler refused its removal: {}", name, answer.message);
    in_scheduler_.erase(name);
  }
  pending_removals_ = std::move(still);
  push_changes(asked, {});
}

void DevicePlugin::ensure_registered() {
  const std::string kubelet_socket = options_.plugin_dir + "/kubelet.sock";
  const std::string memory_socket = options_.plugin_dir + "/" + kMemoryEndpoint;
  const std::string compute_socket = options_.plugin_dir + "/" + kComputeEndpoint;
  const std::optional<FileIdentity> kubelet = socket_identity(kubelet_socket);
  const bool serving = memory_endpoint_ && compute_endpoint_ && memory_identity_ &&
                       socket_identity(memory_socket) == memory_identity_ &&
                       socket_identity(compute_socket) == compute_identity_;
  if (!kubelet) {
    if (registered_) spdlog::warn("{} is gone: waiting for the kubelet to come back", kubelet_socket);
    registered_ = false;
    return;
  }
  if (registered_ && serving && kubelet == kubelet_identity_) return;
  if (!serving) {
    // The kubelet removed our sockets (it does when it starts), or we never served.
    memory_endpoint_.reset();
    compute_endpoint_.reset();
    memory_endpoint_ = std::make_unique<Endpoint>(*this, Resource::kMemory, memory_socket);
    compute_endpoint_ = std::make_unique<Endpoint>(*this, Resource::kCompute, compute_socket);
    memory_identity_ = socket_identity(memory_socket);
    compute_identity_ = socket_identity(compute_socket);
  }
  for (const auto& [endpoint, resource] : {std::pair{kMemoryEndpoint, Resource::kMemory},
                                           std::pair{kComputeEndpoint, Resource::kCompute}}) {
    const std::string problem = register_with_kubelet(kubelet_socket, endpoint, resource_name(resource));
    if (!problem.empty()) {
      if (problem != last_registration_problem_)
        spdlog::warn("registering {} with the kubelet on {} failed: {}; trying again", resource_name(resource),
                     kubelet_socket, problem);
      last_registration_problem_ = problem;
      registered_ = false;
      return;
    }
  }
  last_registration_problem_.clear();
  registered_ = true;
  kubelet_identity_ = kubelet;
  spdlog::info("registered {} and {} with the kubelet ({})", kMemoryResource, kComputeResource, kubelet_socket);
}

int DevicePlugin::run(const std::atomic<bool>& stop) {
  spdlog::info("NVML driver {}; scheduler socket {} (control {}); plugin directory {}",
               inventory_->driver_version(), options_.scheduler_socket, options_.scheduler_control_socket,
               options_.plugin_dir);
  DirectoryWatch watch(options_.plugin_dir);
  while (!stop.load()) {
    refresh_gpus();
    sync_scheduler_and_pods();
    try {
      ensure_registered();
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
    }
    // Wake early when a socket comes or goes, but let the kubelet finish its cleanup.
    if (watch.wait(static_cast<int>(options_.poll.count()))) watch.wait(50);
  }
  spdlog::info("stopping");
  return 0;
}

}  // namespace cuslice::device_plugin
