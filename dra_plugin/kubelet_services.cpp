#include "dra_plugin/kubelet_services.h"

#include <spdlog/spdlog.h>

#include "dra_plugin/resource_slice.h"

namespace cuslice::dra {
void prepare_claims(ClaimPreparer& preparer, const std::vector<ClaimRef>& claims,
                    const std::function<void(const std::string& uid, const PrepareOutcome&)>& answer) {
  for (const ClaimRef& claim : claims) {
    const PrepareOutcome outcome = preparer.prepare(claim);
    if (!outcome.error.empty()) spdlog::warn("{}", outcome.error);
    answer(claim.uid, outcome);
  }
}

void unprepare_claims(ClaimPreparer& preparer, const std::vector<ClaimRef>& claims,
                      const std::function<void(const std::string& uid, const std::string& error)>& answer) {
  for (const ClaimRef& claim : claims) {
    const std::string error = preparer.unprepare(claim);
    if (!error.empty()) spdlog::warn("{}", error);
    answer(claim.uid, error);
  }
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
