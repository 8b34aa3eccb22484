// What a ResourceClaim, as the API server returns it, gives this node's driver, and the tenant
// that makes it so. kube-scheduler wrote the allocation (status.allocation.devices.results):
// for each device of this driver and pool, the request it serves, how much of each capacity
// it consumed (consumedCapacity) and, on a device several claims share, the share's ID.
//
// The tenant's rules:
//   1. A device with no consumedCapacity (a cluster without consumable capacity, which then
//      hands out devices whole) is taken whole: all its memory capacity and 100% compute.
//   2. Each device is one GPU of the node; a claim holds at most one share of each GPU.
//   3. The scheduler gives a tenant one memory quota and one share, on each of its GPUs, so a
//      claim of several GPUs must have consumed the same amounts on each; otherwise it is
//      refused, never given more or less than it was allocated.
//   4. compute is 1 to 100 percent; memory is more than 0.
//
// Pure; no I/O. Errors are sentences for the kubelet, which shows them on the pod.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "dra_plugin/resource_slice.h"
#include "node/gpu_inventory.h"

namespace cuslice::dra {

struct AllocatedDevice {
  std::string request;
  std::string pool;
  std::string device;
  std::optional<std::string> share_id;
  std::optional<uint64_t> memory;   // consumed bytes
  std::optional<uint64_t> compute;  // consumed percent
};

struct ClaimAllocation {
  std::vector<AllocatedDevice> devices;  // this driver's, in this pool
  // The pod the claim is reserved for (status.reservedFor), the first when several share it,
  // when one is: the tenant's labels.
  std::string pod;
};

// The devices `claim` (a ResourceClaim object) was allocated in `pool` of this driver;
// nullopt with `why` when the claim is not the one asked for (`uid`), not allocated, or
// malformed.
std::optional<ClaimAllocation> allocation_of(const nlohmann::json& claim, const std::string& uid,
                                             const std::string& pool, std::string& why);

struct TenantPlan {
  std::vector<uint32_t> gpus;  // NVML indices, ascending
  uint64_t memory_bytes = 0;   // on each
  uint32_t compute_percent = 0;
};

// The tenant for `devices` on this node's `gpus` (rules 1 to 4); nullopt with `why`.
std::optional<TenantPlan> plan_tenant(const std::vector<AllocatedDevice>& devices,
                                      const std::vector<node::GpuInfo>& gpus, const SliceOptions& options,
                                      std::string& why);

}  // namespace cuslice::dra
