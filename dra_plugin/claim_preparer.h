// NodePrepareResources and NodeUnprepareResources, whatever the API version the kubelet
// speaks: a prepared claim is one scheduler tenant on the claim's GPUs with exactly the memory
// and compute kube-scheduler allocated it, a CDI spec that makes the claim's containers that
// tenant, and an entry in the checkpoint.
//
// Prepare: a claim already prepared is answered as before (its tenant made again if the
// scheduler lost it); otherwise the claim is read from the API server, planned
// (claim_allocation.h), written to the checkpoint, made a tenant, and its CDI spec written.
// Unprepare removes all three; a claim not prepared is already unprepared. Both are
// idempotent: the kubelet repeats them after its own restart or a plugin restart.
//
// reconcile() runs after each look at the scheduler: tenants it lost (it restarted) are made
// again; tenants of this driver it has that no prepared claim names (the plugin died between
// its steps) are removed.
//
// Thread-safe: one lock around each call (the kubelet's calls and the control loop's).
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/container_edits.h"
#include "dra_plugin/api_client.h"
#include "dra_plugin/checkpoint.h"
#include "dra_plugin/resource_slice.h"
#include "node/scheduler_client.h"

namespace cuslice::dra {

inline constexpr const char* kTenantPrefix = "dra-";

struct ClaimRef {
  std::string name_space, uid, name;
};

struct PreparedDevice {
  std::vector<std::string> request_names;
  std::string pool, device;
  std::vector<std::string> cdi_device_ids;
  std::optional<std::string> share_id;
};

struct PrepareOutcome {
  std::vector<PreparedDevice> devices;
  std::string error;  // non-empty: not prepared, and why
};

struct PreparerOptions {
  SliceOptions slice;
  MountOptions mounts;
  std::string cdi_dir = "/var/run/cdi";
  std::string checkpoint_path = "/var/lib/kubelet/plugins/gpu.cuslice.io/checkpoint.json";
  bool cap_compute = false;  // a claim's compute is also its cap
};

class ClaimPreparer {
 public:
  ClaimPreparer(PreparerOptions options, const ApiClient& api, const node::SchedulerClient& scheduler)
      : options_(std::move(options)), api_(api), scheduler_(scheduler), checkpoint_(options_.checkpoint_path) {}

  // Reads the checkpoint; false with `why` when it is unreadable.
  bool load(std::string& why);
  // The node's GPUs now (the control loop's last look at NVML).
  void set_gpus(std::vector<node::GpuInfo> gpus);

  PrepareOutcome prepare(const ClaimRef& claim);
  std::string unprepare(const ClaimRef& claim);
  void reconcile(const node::SchedulerState& state);

  size_t prepared() const;

 private:
  std::string make_tenant(const PreparedClaim& claim) const;
  std::string write_cdi(const PreparedClaim& claim) const;
  // Makes the tenant, then writes the CDI spec; "" or why not.
  std::string establish(const PreparedClaim& claim) const;
  // The claim as the API server has it, planned; nullopt with `error`.
  std::optional<PreparedClaim> read_claim(const ClaimRef& ref, std::string& error) const;
  PrepareOutcome answer(const PreparedClaim& claim) const;
  std::string forget(const std::string& uid);

  PreparerOptions options_;
  const ApiClient& api_;
  const node::SchedulerClient& scheduler_;
  mutable std::mutex mutex_;
  Checkpoint checkpoint_;
  std::vector<node::GpuInfo> gpus_;
};

}  // namespace cuslice::dra
