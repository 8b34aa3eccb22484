// A kubelet for tests: the parts of the kubelet a DRA driver meets, over the real protos
// (dra_plugin/proto) and Unix sockets, driven line by line from a test (JSON in on stdin,
// JSON out on stdout, one line each).
//
//   dra_kubelet --registry-dir DIR
//
// Commands:
//   {"cmd":"register"}   as the kubelet's plugin watcher: finds the one *-reg.sock in DIR,
//       asks GetInfo, checks it names a DRAPlugin that serves v1 or v1beta1, and answers
//       NotifyRegistrationStatus(true). Answers the plugin's info.
//   {"cmd":"prepare","version":"v1"|"v1beta1","claims":[{"namespace","uid","name"}]}
//   {"cmd":"unprepare","version":...,"claims":[...]}
//       NodePrepareResources / NodeUnprepareResources on the registered endpoint, in that
//       version (default v1); answers {"claims": {uid: {"error", "devices": [...]}}}.
//   {"cmd":"quit"}
// Every answer has "ok"; failures add "error" (a failed call, not a claim's error).
#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <string>

#include "dra_plugin/proto/dra_v1.grpc.pb.h"
#include "dra_plugin/proto/dra_v1beta1.grpc.pb.h"
#include "dra_plugin/proto/pluginregistration_v1.grpc.pb.h"

namespace {

using nlohmann::json;
namespace v1 = k8s::io::kubelet::pkg::apis::dra::v1;
namespace v1beta1 = k8s::io::kubelet::pkg::apis::dra::v1beta1;

std::unique_ptr<grpc::ClientContext> bounded() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return context;
}

json failed(const grpc::Status& status) {
  return {{"ok", false}, {"error", "code " + std::to_string(status.error_code()) + ": " + status.error_message()}};
}

class Kubelet {
 public:
  explicit Kubelet(std::string registry) : registry_(std::move(registry)) {}

  json handle(const json& in) {
    const std::string cmd = in.value("cmd", "");
    if (cmd == "register") return register_plugin();
    if (cmd == "prepare" || cmd == "unprepare") {
      if (endpoint_.empty()) return {{"ok", false}, {"error", "no plugin registered"}};
      const std::string version = in.value("version", "v1");
      const json claims = in.value("claims", json::array());
      if (version == "v1") return call<v1::DRAPlugin, v1::NodePrepareResourcesRequest, v1::NodeUnprepareResourcesRequest,
                                       v1::NodePrepareResourcesResponse, v1::NodeUnprepareResourcesResponse, true>(
          cmd, claims);
      if (version == "v1beta1")
        return call<v1beta1::DRAPlugin, v1beta1::NodePrepareResourcesRequest, v1beta1::NodeUnprepareResourcesRequest,
                    v1beta1::NodePrepareResourcesResponse, v1beta1::NodeUnprepareResourcesResponse, false>(cmd, claims);
      return {{"ok", false}, {"error", "unknown version " + version}};
    }
    return {{"ok", false}, {"error", "unknown command " + cmd}};
  }

 private:
  json register_plugin() {
    std::string socket;
    for (const auto& entry : std::filesystem::directory_iterator(registry_))
      if (entry.path().filename().string().ends_with("-reg.sock")) socket = entry.path().string();
    if (socket.empty()) return {{"ok", false}, {"error", "no registration socket in " + registry_}};
    auto stub = pluginregistration::Registration::NewStub(
        grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
    pluginregistration::PluginInfo info;
    if (grpc::Status s = stub->GetInfo(bounded().get(), {}, &info); !s.ok()) return failed(s);
    json versions = json::array();
    for (const std::string& v : info.supported_versions()) versions.push_back(v);
    const bool served = std::find(versions.begin(), versions.end(), "v1.DRAPlugin") != versions.end() ||
                        std::find(versions.begin(), versions.end(), "v1beta1.DRAPlugin") != versions.end();
    pluginregistration::RegistrationStatus status;
    status.set_plugin_registered(info.type() == "DRAPlugin" && served);
    if (!status.plugin_registered()) status.set_error("not a DRA plugin of a version this kubelet speaks");
    pluginregistration::RegistrationStatusResponse reply;
    if (grpc::Status s = stub->NotifyRegistrationStatus(bounded().get(), status, &reply); !s.ok()) return failed(s);
    if (status.plugin_registered()) endpoint_ = info.endpoint();
    return {{"ok", status.plugin_registered()},
            {"type", info.type()},
            {"name", info.name()},
            {"endpoint", info.endpoint()},
            {"versions", versions}};
  }

  template <typename Service, typename Prepare, typename Unprepare, typename PrepareReply, typename UnprepareReply,
            bool kShareIds>
  json call(const std::string& cmd, const json& claims) {
    auto stub = Service::NewStub(grpc::CreateChannel("unix:" + endpoint_, grpc::InsecureChannelCredentials()));
    auto fill = [&](auto& request) {
      for (const json& c : claims) {
        auto* claim = request.add_claims();
        claim->set_namespace_(c.value("namespace", ""));
        claim->set_uid(c.value("uid", ""));
        claim->set_name(c.value("name", ""));
      }
    };
    json out = {{"ok", true}, {"claims", json::object()}};
    if (cmd == "prepare") {
      Prepare request;
      fill(request);
      PrepareReply reply;
      if (grpc::Status s = stub->NodePrepareResources(bounded().get(), request, &reply); !s.ok()) return failed(s);
      for (const auto& [uid, r] : reply.claims()) {
        json devices = json::array();
        for (const auto& d : r.devices()) {
          json device = {{"request_names", json(std::vector<std::string>(d.request_names().begin(),
                                                                          d.request_names().end()))},
                         {"pool_name", d.pool_name()},
                         {"device_name", d.device_name()},
                         {"cdi_device_ids", json(std::vector<std::string>(d.cdi_device_ids().begin(),
                                                                           d.cdi_device_ids().end()))}};
          if constexpr (kShareIds)
            if (d.has_share_id()) device["share_id"] = d.share_id();
          devices.push_back(device);
        }
        out["claims"][uid] = {{"error", r.error()}, {"devices", devices}};
      }
    } else {
      Unprepare request;
      fill(request);
      UnprepareReply reply;
      if (grpc::Status s = stub->NodeUnprepareResources(bounded().get(), request, &reply); !s.ok()) return failed(s);
      for (const auto& [uid, r] : reply.claims()) out["claims"][uid] = {{"error", r.error()}};
    }
    return out;
  }

  std::string registry_;
  std::string endpoint_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || std::string(argv[1]) != "--registry-dir") {
    std::cerr << "usage: dra_kubelet --registry-dir DIR\n";
    return 2;
  }
  Kubelet kubelet(argv[2]);
  std::cout << json{{"ready", true}}.dump() << std::endl;
  for (std::string line; std::getline(std::cin, line);) {
    const json in = json::parse(line, nullptr, false);
    if (in.is_discarded()) {
      std::cout << json{{"ok", false}, {"error", "not JSON"}}.dump() << std::endl;
      continue;
    }
    if (in.value("cmd", "") == "quit") break;
    std::cout << kubelet.handle(in).dump() << std::endl;
  }
  return 0;
}
