// The DevicePlugin gRPC service the kubelet calls, one per resource, each on its own socket
// in the plugin directory. It only translates: every decision is the DevicePlugin's.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "device_plugin/kubelet_registration.h"
#include "device_plugin/proto/deviceplugin_v1beta1.grpc.pb.h"

namespace cuslice::device_plugin {

class DevicePlugin;
enum class Resource { kMemory, kCompute };

class PluginService final : public v1beta1::DevicePlugin::Service {
 public:
  PluginService(DevicePlugin& plugin, Resource resource) : plugin_(plugin), resource_(resource) {}

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                      v1beta1::DevicePluginOptions* options) override;
  grpc::Status ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty*,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override;
  grpc::Status GetPreferredAllocation(grpc::ServerContext*, const v1beta1::PreferredAllocationRequest* request,
                                      v1beta1::PreferredAllocationResponse* response) override;
  grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* request,
                        v1beta1::AllocateResponse* response) override;
  grpc::Status PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest*,
                                 v1beta1::PreStartContainerResponse*) override;

 private:
  DevicePlugin& plugin_;
  Resource resource_;
};

// One resource's service, serving on <plugin dir>/<endpoint> until stopped.
class Endpoint {
 public:
  // Removes a stale socket file, then serves; throws std::runtime_error when it cannot.
  Endpoint(DevicePlugin& plugin, Resource resource, const std::string& socket_path);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

 private:
  PluginService service_;
  std::unique_ptr<grpc::Server> server_;
  std::string socket_path_;
  std::optional<FileIdentity> identity_;
};

}  // namespace cuslice::device_plugin
