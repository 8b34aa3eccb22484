#include "device_plugin/pod_resources.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "device_plugin/device_ids.h"
#include "device_plugin/proto/podresources_v1.grpc.pb.h"

namespace cuslice::device_plugin {

std::optional<std::vector<Holding>> list_holdings(const std::string& socket_path, std::string& why) {
  auto channel = grpc::CreateChannel("unix:" + socket_path, grpc::InsecureChannelCredentials());
  auto stub = v1::PodResourcesLister::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::ListPodResourcesResponse response;
  const grpc::Status status = stub->List(&context, v1::ListPodResourcesRequest{}, &response);
  if (!status.ok()) {
    why = "PodResources List on " + socket_path + ": " + status.error_message();
    return std::nullopt;
  }
  std::vector<Holding> out;
  for (const v1::PodResources& pod : response.pod_resources()) {
    for (const v1::ContainerResources& container : pod.containers()) {
      Holding h;
      h.workload = {pod.namespace_(), pod.name(), container.name()};
      for (const v1::ContainerDevices& devices : container.devices()) {
        std::vector<std::string>* into = devices.resource_name() == kMemoryResource    ? &h.memory_ids
                                         : devices.resource_name() == kComputeResource ? &h.compute_ids
                                                                                         : nullptr;
        if (into) into->insert(into->end(), devices.device_ids().begin(), devices.device_ids().end());
      }
      if (!h.memory_ids.empty() || !h.compute_ids.empty()) out.push_back(std::move(h));
    }
  }
  return out;
}

}  // namespace cuslice::device_plugin
