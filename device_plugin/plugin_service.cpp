#include "device_plugin/plugin_service.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include <stdexcept>

#include "device_plugin/device_plugin.h"
#include "device_plugin/kubelet_registration.h"

namespace cuslice::device_plugin {

grpc::Status PluginService::GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                                   v1beta1::DevicePluginOptions* options) {
  options->set_get_preferred_allocation_available(true);
  // Compute only: its start is when the plugin knows for sure whether the container holds
  // memory too, and whether its compute fits that GPU (container_start.h).
  options->set_pre_start_required(resource_ == Resource::kCompute);
  return grpc::Status::OK;
}

grpc::Status PluginService::ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty*,
                                         grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) {
  std::vector<Device> sent;
  bool first = true;
  uint64_t seen = 0;
  for (;;) {
    std::vector<Device> now;
    if (!plugin_.devices(resource_, now, seen)) return grpc::Status::OK;  // the plugin stops
    if (first || now != sent) {
      v1beta1::ListAndWatchResponse response;
      size_t healthy = 0;
      for (const Device& d : now) {
        v1beta1::Device* out = response.add_devices();
        out->set_id(d.id);
        out->set_health(d.healthy ? "Healthy" : "Unhealthy");
        healthy += d.healthy;
      }
      if (!writer->Write(response)) return grpc::Status::OK;  // the kubelet hung up
      spdlog::info("{}: advertised {} devices, {} healthy", resource_name(resource_), now.size(), healthy);
      sent = std::move(now);
      first = false;
    }
    plugin_.wait_for_change(seen, std::chrono::seconds(1));
    if (context->IsCancelled()) return grpc::Status::CANCELLED;
  }
}

grpc::Status PluginService::GetPreferredAllocation(grpc::ServerContext*,
                                                   const v1beta1::PreferredAllocationRequest* request,
                                                   v1beta1::PreferredAllocationResponse* response) {
  for (const auto& r : request->container_requests()) {
    const std::vector<std::string> available(r.available_deviceids().begin(), r.available_deviceids().end());
    const std::vector<std::string> must(r.must_include_deviceids().begin(), r.must_include_deviceids().end());
    const std::vector<std::string> ids =
        plugin_.preferred(resource_, available, must, static_cast<size_t>(std::max(r.allocation_size(), 0)));
    auto* out = response->add_container_responses();
    for (const std::string& id : ids) out->add_deviceids(id);
  }
  return grpc::Status::OK;
}

grpc::Status PluginService::Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* request,
                                     v1beta1::AllocateResponse* response) {
  for (const auto& r : request->container_requests()) {
    const std::vector<std::string> ids(r.devices_ids().begin(), r.devices_ids().end());
    std::string error;
    if (!plugin_.allocate(resource_, ids, *response->add_container_responses(), error)) {
      spdlog::warn("Allocate refused: {}", error);
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, error);
    }
  }
  return grpc::Status::OK;
}

grpc::Status PluginService::PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest* request,
                                              v1beta1::PreStartContainerResponse*) {
  const std::vector<std::string> ids(request->devices_ids().begin(), request->devices_ids().end());
  std::string error;
  if (plugin_.pre_start(resource_, ids, error)) return grpc::Status::OK;
  spdlog::warn("PreStartContainer refused: {}", error);
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, error);
}

Endpoint::Endpoint(DevicePlugin& plugin, Resource resource, const std::string& socket_path)
    : service_(plugin, resource), socket_path_(socket_path) {
  unlink(socket_path_.c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket_path_, grpc::InsecureServerCredentials());
  builder.RegisterService(&service_);
  server_ = builder.BuildAndStart();
  if (!server_) throw std::runtime_error("cannot serve on " + socket_path_);
  identity_ = socket_identity(socket_path_);
}

Endpoint::~Endpoint() {
  // Open ListAndWatch streams see the cancellation within a second.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
  // Ours unless the kubelet removed it and something else took the name since.
  if (socket_identity(socket_path_) == identity_) unlink(socket_path_.c_str());
}

}  // namespace cuslice::device_plugin
