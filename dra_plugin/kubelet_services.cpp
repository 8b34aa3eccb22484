#include "dra_plugin/kubelet_services.h"

#include <spdlog/spdlog.h>

#include "dra_plugin/resource_slice.h"

namespace cuslice::dra {
namespace {

namespace v1 = k8s::io::kubelet::pkg::apis::dra::v1;
namespace v1beta1 = k8s::io::kubelet::pkg::apis::dra::v1beta1;

// Both versions' messages have the same fields but share_id: one template serves both.
template <typename Request, typename Reply, bool kShareIds>
void prepare_all(ClaimPreparer& preparer, const Request& request, Reply& reply) {
  for (const auto& claim : request.claims()) {
    const PrepareOutcome outcome = preparer.prepare({claim.namespace_(), claim.uid(), claim.name()});
    auto& entry = (*reply.mutable_claims())[claim.uid()];
    if (!outcome.error.empty()) {
      spdlog::warn("{}", outcome.error);
      entry.set_error(outcome.error);
      continue;
    }
    for (const PreparedDevice& d : outcome.devices) {
      auto* device = entry.add_devices();
      for (const std::string& r : d.request_names) device->add_request_names(r);
      device->set_pool_name(d.pool);
      device->set_device_name(d.device);
      for (const std::string& id : d.cdi_device_ids) device->add_cdi_device_ids(id);
      if constexpr (kShareIds)
        if (d.share_id) device->set_share_id(*d.share_id);
    }
  }
}

template <typename Request, typename Reply>
void unprepare_all(ClaimPreparer& preparer, const Request& request, Reply& reply) {
  for (const auto& claim : request.claims()) {
    const std::string error = preparer.unprepare({claim.namespace_(), claim.uid(), claim.name()});
    if (!error.empty()) spdlog::warn("{}", error);
    (*reply.mutable_claims())[claim.uid()].set_error(error);
  }
}

}  // namespace

grpc::Status DraServiceV1::NodePrepareResources(grpc::ServerContext*, const v1::NodePrepareResourcesRequest* request,
                                                v1::NodePrepareResourcesResponse* reply) {
  prepare_all<v1::NodePrepareResourcesRequest, v1::NodePrepareResourcesResponse, true>(preparer_, *request, *reply);
  return grpc::Status::OK;
}

grpc::Status DraServiceV1::NodeUnprepareResources(grpc::ServerContext*,
                                                  const v1::NodeUnprepareResourcesRequest* request,
                                                  v1::NodeUnprepareResourcesResponse* reply) {
  unprepare_all(preparer_, *request, *reply);
  return grpc::Status::OK;
}

grpc::Status DraServiceV1beta1::NodePrepareResources(grpc::ServerContext*,
                                                     const v1beta1::NodePrepareResourcesRequest* request,
                                                     v1beta1::NodePrepareResourcesResponse* reply) {
  prepare_all<v1beta1::NodePrepareResourcesRequest, v1beta1::NodePrepareResourcesResponse, false>(preparer_, *request,
                                                                                                   *reply);
  return grpc::Status::OK;
}

grpc::Status DraServiceV1beta1::NodeUnprepareResources(grpc::ServerContext*,
                                                       const v1beta1::NodeUnprepareResourcesRequest* request,
                                                       v1beta1::NodeUnprepareResourcesResponse* reply) {
  unprepare_all(preparer_, *request, *reply);
  return grpc::Status::OK;
}

grpc::Status RegistrationService::GetInfo(grpc::ServerContext*, const pluginregistration::InfoRequest*,
                                          pluginregistration::PluginInfo* info) {
  info->set_type("DRAPlugin");
  info->set_name(kDriverName);
  info->set_endpoint(endpoint_);
  // The gRPC services the endpoint serves, newest first: the kubelet picks the first it knows.
  info->add_supported_versions("v1.DRAPlugin");
  info->add_supported_versions("v1beta1.DRAPlugin");
  return grpc::Status::OK;
}

grpc::Status RegistrationService::NotifyRegistrationStatus(grpc::ServerContext*,
                                                           const pluginregistration::RegistrationStatus* status,
                                                           pluginregistration::RegistrationStatusResponse*) {
  registered_ = status->plugin_registered();
  if (status->plugin_registered()) spdlog::info("the kubelet registered the plugin");
  else spdlog::error("the kubelet did not register the plugin: {}", status->error());
  return grpc::Status::OK;
}

}  // namespace cuslice::dra
