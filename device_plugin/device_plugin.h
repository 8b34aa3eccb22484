// cuslice-device-plugin's control: one loop that keeps the plugin's view of the node true,
// and the entry points the kubelet's calls reach (PluginService).
//
// Every poll period (and at once when a socket appears or goes in the plugin directory) the
// loop:
//   1. asks NVML for the GPUs (a GPU gone makes its IDs unhealthy);
//   2. asks the scheduler for its plugin tenants and its other tenants' quotas (no answer:
//      every ID unhealthy; tenants it lost, after a restart, are created again; tenants it
//      has and the plugin does not know, after a plugin restart, are taken back);
//   3. reads PodResources: links each tenant to its container and compute IDs, and removes
//      the tenants of containers gone;
//   4. sends the scheduler what changed (shares, labels; shrinking shares first), and wakes
//      ListAndWatch;
//   5. serves and registers both resources again when the kubelet restarted.
// One mutex guards the ledger; the kubelet's calls and the loop take it in turn. Calls to the
// scheduler happen under it (they are short and bounded), calls to the kubelet never do.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "device_plugin/allocate_response.h"
#include "device_plugin/kubelet_registration.h"
#include "device_plugin/ledger.h"
#include "device_plugin/plugin_service.h"
#include "device_plugin/proto/deviceplugin_v1beta1.pb.h"
#include "node/gpu_inventory.h"
#include "node/scheduler_client.h"

namespace cuslice::device_plugin {

struct PluginOptions {
  std::string plugin_dir = "/var/lib/kubelet/device-plugins";
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  // The tenant socket, whose directory containers are given; the control socket, which the
  // plugin's requests go to and which containers never see (protocol/control_socket.h).
  std::string scheduler_socket = "/run/cuslice/cuslice.sock";
  std::string scheduler_control_socket = "/run/cuslice-control/cuslice.sock";
  std::chrono::milliseconds poll{1000};
  uint64_t reserve_memory = 0;  // bytes per GPU never handed out
  // After the kubelet restarted, it lists no pod until it has synced them: no tenant is
  // removed for this long.
  std::chrono::milliseconds kubelet_settle{30'000};
  ResponseOptions response;
  LedgerOptions ledger;
};

const char* resource_name(Resource resource);

class DevicePlugin {
 public:
  DevicePlugin(PluginOptions options, std::unique_ptr<node::GpuInventory> inventory);
  ~DevicePlugin();
  DevicePlugin(const DevicePlugin&) = delete;
  DevicePlugin& operator=(const DevicePlugin&) = delete;

  // Serves until `stop` is set. Returns the exit status.
  int run(const std::atomic<bool>& stop);

  // For PluginService. devices(): the list now and its version; false once stopping.
  bool devices(Resource resource, std::vector<Device>& out, uint64_t& version);
  // Returns when the version differs from `seen`, on stop, or after `timeout`.
  void wait_for_change(uint64_t seen, std::chrono::milliseconds timeout);
  std::vector<std::string> preferred(Resource resource, const std::vector<std::string>& available,
                                     const std::vector<std::string>& must_include, size_t size);
  bool allocate(Resource resource, const std::vector<std::string>& ids, v1beta1::ContainerAllocateResponse& out,
                std::string& error);
  // PreStartContainer: false with `error` when the container may not start (container_start.h).
  // Reads PodResources before it takes the mutex.
  bool pre_start(Resource resource, const std::vector<std::string>& ids, std::string& error);

 private:
  void refresh_gpus();
  void sync_scheduler_and_pods();
  // Its steps, with mutex_ held (steps 2 to 4 above).
  void follow_scheduler(const std::optional<node::SchedulerState>& state, const std::string& why, bool first,
                        Clock::time_point now);
  void hold_back_for_other_tenants(const node::SchedulerState& state);
  void take_back_plugin_tenants(const node::SchedulerState& state, Clock::time_point now);
  void follow_pods(const std::optional<std::vector<Holding>>& holdings, const std::string& why,
                   const std::optional<FileIdentity>& pod_socket, Clock::time_point now);
  void tell_scheduler(Clock::time_point asked);
  void ensure_registered();
  void changed();  // with mutex_ held: a new version for ListAndWatch
  wire::PluginTenant to_wire(const Allocation& allocation) const;
  // Sends the tenant's spec when it changed; the scheduler's refusal, or "".
  std::string apply(const Allocation& allocation, const char* why);
  // Applies every tenant made before `made_before` but `skip` whose spec changed, with mutex_
  // held; shares that shrink first, so that a GPU's shares never add up to over 100% on the way.
  void push_changes(Clock::time_point made_before, const std::string& skip);

  PluginOptions options_;
  std::unique_ptr<node::GpuInventory> inventory_;
  node::SchedulerClient scheduler_;

  std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t version_ = 1;
  bool stopping_ = false;
  Ledger ledger_;
  std::map<uint32_t, std::optional<uint32_t>> minors_;        // GPU index -> /dev/nvidia<minor>
  std::map<std::string, wire::PluginTenant> in_scheduler_;    // as last listed or applied
  std::vector<std::string> pending_removals_;                 // tenants to remove once it answers
  std::set<std::string> warned_unlimited_;                    // other tenants without a quota
  std::string last_gpu_problem_, last_pods_problem_;
  bool scheduler_checked_ = false;

  // Registration state: the loop's alone.
  std::unique_ptr<Endpoint> memory_endpoint_, compute_endpoint_;
  std::optional<FileIdentity> kubelet_identity_, memory_identity_, compute_identity_;
  std::optional<FileIdentity> pod_resources_identity_;
  Clock::time_point removals_allowed_from_{};
  bool registered_ = false;
  std::string last_registration_problem_;
};

}  // namespace cuslice::device_plugin
