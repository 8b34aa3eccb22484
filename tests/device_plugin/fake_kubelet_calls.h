// What the test kubelet (fake_kubelet.cpp) sends a device plugin while it admits a container,
// and how it reads the answers: GetPreferredAllocation, the kubelet's own pick of IDs
// ("spread"), and an Allocate answer as the JSON the tests read. No state of its own.
#pragma once

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "device_plugin/proto/deviceplugin_v1beta1.grpc.pb.h"

namespace cuslice::test {

using nlohmann::json;

// The GPU a memory ID names ("" for a compute ID).
inline std::string gpu_of(const std::string& id) {
  const size_t m = id.rfind("-m");
  return m == std::string::npos ? "" : id.substr(0, m);
}

// The IDs the plugin prefers of `available`, those it offered that are available.
inline json preferred_ids(v1beta1::DevicePlugin::Stub* stub, const std::vector<std::string>& available, int needed,
                          std::vector<std::string>& chosen) {
  v1beta1::PreferredAllocationRequest request;
  auto* r = request.add_container_requests();
  for (const std::string& id : available) r->add_available_deviceids(id);
  r->set_allocation_size(needed);
  v1beta1::PreferredAllocationResponse response;
  grpc::ClientContext context;
  const grpc::Status s = stub->GetPreferredAllocation(&context, request, &response);
  if (!s.ok()) return {{"ok", false}, {"error", "GetPreferredAllocation: " + s.error_message()}};
  if (response.container_responses_size() > 0)
    for (const std::string& id : response.container_responses(0).deviceids())
      if (static_cast<int>(chosen.size()) < needed && std::find(available.begin(), available.end(), id) != available.end())
        chosen.push_back(id);
  return {{"ok", true}};
}

// Round-robin over GPUs: what an unlucky choice by the kubelet looks like.
inline void spread_ids(const std::vector<std::string>& available, int needed, std::vector<std::string>& chosen) {
  std::map<std::string, std::vector<std::string>> by_gpu;
  for (const std::string& id : available) by_gpu[gpu_of(id)].push_back(id);
  for (size_t i = 0; static_cast<int>(chosen.size()) < needed; ++i)
    for (auto& [g, ids] : by_gpu)
      if (i < ids.size() && static_cast<int>(chosen.size()) < needed) chosen.push_back(ids[i]);
}

// An Allocate answer as the tests read it.
inline json describe(const std::vector<std::string>& chosen, const v1beta1::ContainerAllocateResponse& cr) {
  json mounts = json::array(), devices = json::array(), cdi = json::array();
  for (const auto& m : cr.mounts())
    mounts.push_back({{"container_path", m.container_path()}, {"host_path", m.host_path()}, {"read_only", m.read_only()}});
  for (const auto& d : cr.devices())
    devices.push_back({{"container_path", d.container_path()}, {"host_path", d.host_path()}, {"permissions", d.permissions()}});
  for (const auto& d : cr.cdi_devices()) cdi.push_back(d.name());
  return {{"ids", chosen},
          {"envs", std::map<std::string, std::string>(cr.envs().begin(), cr.envs().end())},
          {"mounts", mounts},
          {"devices", devices},
          {"cdi_devices", cdi}};
}

}  // namespace cuslice::test
