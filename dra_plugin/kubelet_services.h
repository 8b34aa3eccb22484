// The gRPC services the kubelet calls: DRAPlugin in versions v1 and v1beta1 (the same calls;
// v1 also carries a device's share ID), both on the plugin's socket, and Registration on the
// registration socket in the kubelet's plugins_registry directory, which tells the kubelet's
// plugin watcher the driver's name, the plugin socket and the versions it serves.
//
// Adapters only: every claim goes to the ClaimPreparer; nothing here keeps state but whether
// the kubelet said it registered the plugin.
#pragma once

#include <atomic>
#include <string>

#include "dra_plugin/claim_preparer.h"
#include "dra_plugin/proto/dra_v1.grpc.pb.h"
#include "dra_plugin/proto/dra_v1beta1.grpc.pb.h"
#include "dra_plugin/proto/pluginregistration_v1.grpc.pb.h"

namespace cuslice::dra {

class DraServiceV1 final : public k8s::io::kubelet::pkg::apis::dra::v1::DRAPlugin::Service {
 public:
  explicit DraServiceV1(ClaimPreparer& preparer) : preparer_(preparer) {}
  grpc::Status NodePrepareResources(grpc::ServerContext*,
                                    const k8s::io::kubelet::pkg::apis::dra::v1::NodePrepareResourcesRequest* request,
                                    k8s::io::kubelet::pkg::apis::dra::v1::NodePrepareResourcesResponse* reply) override;
  grpc::Status NodeUnprepareResources(
      grpc::ServerContext*, const k8s::io::kubelet::pkg::apis::dra::v1::NodeUnprepareResourcesRequest* request,
      k8s::io::kubelet::pkg::apis::dra::v1::NodeUnprepareResourcesResponse* reply) override;

 private:
  ClaimPreparer& preparer_;
};

class DraServiceV1beta1 final : public k8s::io::kubelet::pkg::apis::dra::v1beta1::DRAPlugin::Service {
 public:
  explicit DraServiceV1beta1(ClaimPreparer& preparer) : preparer_(preparer) {}
  grpc::Status NodePrepareResources(
      grpc::ServerContext*, const k8s::io::kubelet::pkg::apis::dra::v1beta1::NodePrepareResourcesRequest* request,
      k8s::io::kubelet::pkg::apis::dra::v1beta1::NodePrepareResourcesResponse* reply) override;
  grpc::Status NodeUnprepareResources(
      grpc::ServerContext*, const k8s::io::kubelet::pkg::apis::dra::v1beta1::NodeUnprepareResourcesRequest* request,
      k8s::io::kubelet::pkg::apis::dra::v1beta1::NodeUnprepareResourcesResponse* reply) override;

 private:
  ClaimPreparer& preparer_;
};

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
