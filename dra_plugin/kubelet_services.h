// The gRPC services the kubelet calls: DRAPlugin in versions v1 and v1beta1 (the same calls;
// v1 also carries a device's share ID), both on the plugin's socket, and Registration on the
// registration socket in the kubelet's plugins_registry directory, which tells the kubelet's
// plugin watcher the driver's name, the plugin socket and the versions it serves.
//
// Adapters only: every claim goes to the ClaimPreparer; nothing here keeps state but whether
// the kubelet said it registered the plugin.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "dra_plugin/claim_preparer.h"
#include "dra_plugin/proto/dra_v1.grpc.pb.h"
#include "dra_plugin/proto/dra_v1beta1.grpc.pb.h"
#include "dra_plugin/proto/pluginregistration_v1.grpc.pb.h"

namespace cuslice::dra {

// Prepares (or unprepares) each claim of a call, in order, and hands `answer` the outcome; the
// two versions' messages have the same fields but a device's share_id, which only v1 has.
void prepare_claims(ClaimPreparer& preparer, const std::vector<ClaimRef>& claims,
                    const std::function<void(const std::string& uid, const PrepareOutcome&)>& answer);
void unprepare_claims(ClaimPreparer& preparer, const std::vector<ClaimRef>& claims,
                      const std::function<void(const std::string& uid, const std::string& error)>& answer);

template <typename Request>
std::vector<ClaimRef> claims_of(const Request& request) {
  std::vector<ClaimRef> claims;
  for (const auto& claim : request.claims()) claims.push_back({claim.namespace_(), claim.uid(), claim.name()});
  return claims;
}

template <bool kShareIds, typename Device>
void set_device(Device& device, const PreparedDevice& d) {
  for (const std::string& r : d.request_names) device.add_request_names(r);
  device.set_pool_name(d.pool);
  device.set_device_name(d.device);
  for (const std::string& id : d.cdi_device_ids) device.add_cdi_device_ids(id);
  if constexpr (kShareIds)
    if (d.share_id) device.set_share_id(*d.share_id);
}

// The DRAPlugin service of one version of the kubelet's API, given its generated types.
template <typename Service, typename PrepareRequest, typename PrepareResponse, typename UnprepareRequest,
          typename UnprepareResponse, bool kShareIds>
class DraService final : public Service {
 public:
  explicit DraService(ClaimPreparer& preparer) : preparer_(preparer) {}

  grpc::Status NodePrepareResources(grpc::ServerContext*, const PrepareRequest* request,
                                    PrepareResponse* reply) override {
    prepare_claims(preparer_, claims_of(*request), [&](const std::string& uid, const PrepareOutcome& outcome) {
      auto& entry = (*reply->mutable_claims())[uid];
      if (!outcome.error.empty()) {
        entry.set_error(outcome.error);
        return;
      }
      for (const PreparedDevice& d : outcome.devices) set_device<kShareIds>(*entry.add_devices(), d);
    });
    return grpc::Status::OK;
  }

  grpc::Status NodeUnprepareResources(grpc::ServerContext*, const UnprepareRequest* request,
                                      UnprepareResponse* reply) override {
    unprepare_claims(preparer_, claims_of(*request), [&](const std::string& uid, const std::string& error) {
      (*reply->mutable_claims())[uid].set_error(error);
    });
    return grpc::Status::OK;
  }

 private:
  ClaimPreparer& preparer_;
};

namespace dra_v1 = k8s::io::kubelet::pkg::apis::dra::v1;
namespace dra_v1beta1 = k8s::io::kubelet::pkg::apis::dra::v1beta1;
using DraServiceV1 =
    DraService<dra_v1::DRAPlugin::Service, dra_v1::NodePrepareResourcesRequest, dra_v1::NodePrepareResourcesResponse,
               dra_v1::NodeUnprepareResourcesRequest, dra_v1::NodeUnprepareResourcesResponse, true>;
using DraServiceV1beta1 = DraService<dra_v1beta1::DRAPlugin::Service, dra_v1beta1::NodePrepareResourcesRequest,
                                     dra_v1beta1::NodePrepareResourcesResponse,
                                     dra_v1beta1::NodeUnprepareResourcesRequest,
                                     dra_v1beta1::NodeUnprepareResourcesResponse, false>;

class RegistrationService final : public pluginregistration::Registration::Service {
 public:
  // `endpoint`: the plugin socket's path on the node.
  explicit RegistrationService(std::string endpoint) : endpoint_(std::move(endpoint)) {}
  grpc::Status GetInfo(grpc::ServerContext*, const pluginregistration::InfoRequest*,
                       pluginregistration::PluginInfo* info) override;
  grpc::Status NotifyRegistrationStatus(grpc::ServerContext*, const pluginregistration::RegistrationStatus* status,
                                        pluginregistration::RegistrationStatusResponse*) override;
  bool registered() const { return registered_.load(); }

 private:
  std::string endpoint_;
  std::atomic<bool> registered_{false};
};

}  // namespace cuslice::dra
