// A kubelet for tests: the parts of the kubelet a device plugin meets, over the real
// protos and Unix sockets, driven line by line from a test (JSON in on stdin, JSON out on
// stdout, one line each).
//
//   fake_kubelet --plugin-dir DIR --pod-resources-socket PATH
//
// It serves Registration on DIR/kubelet.sock; on Register it dials the plugin's endpoint,
// asks its options and keeps its ListAndWatch stream, as the kubelet's devicemanager does.
// It serves PodResourcesLister (List, Get) on PATH from its table of admitted pods. Commands:
//   {"cmd":"wait_registered","resource":R,"count":N}  until R registered N times in all
//   {"cmd":"devices","resource":R}                   the last ListAndWatch list: {id: health}
//   {"cmd":"wait_devices","resource":R,"total":N,"healthy":M}   until the list says so
//   {"cmd":"admit","namespace":NS,"pod":P,"containers":[{"name":C,"requests":{R:n},
//           "order":[R...]}], "pick":"preferred"|"spread"|"lowest"}
//       for each container and each resource (in "order"), as the kubelet: the healthy IDs
//       no pod holds; GetPreferredAllocation when the plugin offers it and pick is
//       "preferred" ("spread": IDs taken round-robin over GPUs, "lowest": sorted); Allocate.
//       A refusal rejects the pod (nothing of it is kept) and answers the plugin's message.
//       PodResources lists the pod while it is admitted, each container's IDs of a resource
//       once the plugin has answered that Allocate. Then each container starts: its
//       "start" is {"ok": true} or {"ok": false, "error": the PreStartContainer refusal}.
//   {"cmd":"start","namespace":NS,"pod":P,"container":C}   the container starts again
//   {"cmd":"delete","namespace":NS,"pod":P}           the pod is gone from PodResources
//   {"cmd":"restart","down_ms":T}                    a kubelet restart: both servers stop,
//       kubelet.sock and every other socket in DIR are removed (as the kubelet's cleanup
//       does), plugin connections dropped; after T ms both serve again, pods kept
//   {"cmd":"quit"}
// Every answer has "ok"; failures add "error".
#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "device_plugin/proto/deviceplugin_v1beta1.grpc.pb.h"
#include "device_plugin/proto/podresources_v1.grpc.pb.h"
#include "tests/device_plugin/fake_kubelet_calls.h"

namespace {

using cuslice::test::describe;
using cuslice::test::preferred_ids;
using cuslice::test::spread_ids;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Plugin {
  std::string resource;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub;
  v1beta1::DevicePluginOptions options;
  std::map<std::string, std::string> devices;  // id -> health
  std::unique_ptr<grpc::ClientContext> watch_context;
  std::thread watcher;
  bool streaming = false;
};

struct Container {
  std::string name;
  std::map<std::string, std::vector<std::string>> devices;  // resource -> ids
};

struct Pod {
  std::string ns, name;
  std::vector<Container> containers;
};

class TestKubelet;

class RegistrationService final : public v1beta1::Registration::Service {
 public:
  explicit RegistrationService(TestKubelet& k) : kubelet_(k) {}
  grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* request, v1beta1::Empty*) override;

 private:
  TestKubelet& kubelet_;
};

class PodResourcesService final : public v1::PodResourcesLister::Service {
 public:
  explicit PodResourcesService(TestKubelet& k) : kubelet_(k) {}
  grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*, v1::ListPodResourcesResponse* out) override;
  grpc::Status Get(grpc::ServerContext*, const v1::GetPodResourcesRequest* request,
                   v1::GetPodResourcesResponse* out) override;

 private:
  TestKubelet& kubelet_;
};

class TestKubelet {
 public:
  TestKubelet(std::string dir, std::string pod_socket)
      : dir_(std::move(dir)), pod_socket_(std::move(pod_socket)), registration_(*this), pod_resources_(*this) {}

  void start() {
    std::filesystem::create_directories(dir_);
    std::filesystem::create_directories(std::filesystem::path(pod_socket_).parent_path());
    unlink((dir_ + "/kubelet.sock").c_str());
    unlink(pod_socket_.c_str());
    grpc::ServerBuilder r;
    r.AddListeningPort("unix:" + dir_ + "/kubelet.sock", grpc::InsecureServerCredentials());
    r.RegisterService(&registration_);
    registration_server_ = r.BuildAndStart();
    grpc::ServerBuilder p;
    p.AddListeningPort("unix:" + pod_socket_, grpc::InsecureServerCredentials());
    p.RegisterService(&pod_resources_);
    pod_server_ = p.BuildAndStart();
    if (!registration_server_ || !pod_server_) throw std::runtime_error("cannot serve");
  }

  void stop() {
    for (auto* server : {&registration_server_, &pod_server_}) {
      if (!*server) continue;
      (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
      (*server)->Wait();
      server->reset();
    }
    std::map<std::string, std::unique_ptr<Plugin>> plugins;
    {
      std::lock_guard lock(mutex_);
      plugins.swap(plugins_);
    }
    for (auto& [name, p] : plugins) disconnect(*p);
  }

  // As the kubelet's CleanupPluginDirectory: every socket in the directory goes.
  void cleanup_directory() {
    for (const auto& entry : std::filesystem::directory_iterator(dir_))
      if (entry.is_socket()) std::filesystem::remove(entry.path());
    unlink(pod_socket_.c_str());
  }

  grpc::Status on_register(const v1beta1::RegisterRequest& request) {
    if (request.version() != "v1beta1")
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unsupported version " + request.version());
    if (request.resource_name().find('/') == std::string::npos)
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "not an extended resource name");
    auto plugin = std::make_unique<Plugin>();
    plugin->resource = request.resource_name();
    plugin->channel = grpc::CreateChannel("unix:" + dir_ + "/" + request.endpoint(), grpc::InsecureChannelCredentials());
    if (!plugin->channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)))
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "cannot dial " + request.endpoint());
    plugin->stub = v1beta1::DevicePlugin::NewStub(plugin->channel);
    grpc::ClientContext context;
    const grpc::Status status = plugin->stub->GetDevicePluginOptions(&context, v1beta1::Empty{}, &plugin->options);
    if (!status.ok()) return status;
    Plugin* raw = plugin.get();
    raw->watch_context = std::make_unique<grpc::ClientContext>();
    raw->streaming = true;
    raw->watcher = std::thread([this, raw] { watch(*raw); });
    std::unique_ptr<Plugin> old;
    {
      std::lock_guard lock(mutex_);
      old = std::move(plugins_[request.resource_name()]);
      plugins_[request.resource_name()] = std::move(plugin);
      ++registrations_[request.resource_name()];
      cv_.notify_all();
    }
    if (old) disconnect(*old);
    return grpc::Status::OK;
  }

  void watch(Plugin& p) {
    auto reader = p.stub->ListAndWatch(p.watch_context.get(), v1beta1::Empty{});
    v1beta1::ListAndWatchResponse response;
    while (reader->Read(&response)) {
      std::lock_guard lock(mutex_);
      p.devices.clear();
      for (const auto& d : response.devices()) p.devices[d.id()] = d.health();
      ++updates_;
      cv_.notify_all();
    }
    reader->Finish();
    std::lock_guard lock(mutex_);
    p.streaming = false;
    cv_.notify_all();
  }

  void disconnect(Plugin& p) {
    p.watch_context->TryCancel();
    if (p.watcher.joinable()) p.watcher.join();
  }

  void fill(v1::PodResources& out, const Pod& pod) {
    out.set_name(pod.name);
    out.set_namespace_(pod.ns);
    for (const Container& c : pod.containers) {
      v1::ContainerResources* cr = out.add_containers();
      cr->set_name(c.name);
      for (const auto& [resource, ids] : c.devices) {
        v1::ContainerDevices* d = cr->add_devices();
        d->set_resource_name(resource);
        for (const std::string& id : ids) d->add_device_ids(id);
      }
    }
  }

  grpc::Status list(v1::ListPodResourcesResponse& out) {
    std::lock_guard lock(mutex_);
    for (const Pod& pod : pods_) fill(*out.add_pod_resources(), pod);
    return grpc::Status::OK;
  }

  grpc::Status get(const v1::GetPodResourcesRequest& request, v1::GetPodResourcesResponse& out) {
    std::lock_guard lock(mutex_);
    for (const Pod& pod : pods_)
      if (pod.ns == request.pod_namespace() && pod.name == request.pod_name()) {
        fill(*out.mutable_pod_resources(), pod);
        return grpc::Status::OK;
      }
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such pod");
  }

  json command(const json& in) {
    const std::string cmd = in.at("cmd");
    if (cmd == "wait_registered") return wait_registered(in.at("resource"), in.value("count", 1));
    if (cmd == "devices") {
      std::lock_guard lock(mutex_);
      return {{"ok", true}, {"devices", devices_of(in.at("resource"))}};
    }
    if (cmd == "wait_devices") return wait_devices(in.at("resource"), in.value("total", -1), in.value("healthy", -1));
    if (cmd == "admit") return admit(in);
    if (cmd == "start") return start_container(in.at("namespace"), in.at("pod"), in.at("container"));
    if (cmd == "delete") {
      std::lock_guard lock(mutex_);
      const auto before = pods_.size();
      std::erase_if(pods_, [&](const Pod& p) { return p.ns == in.at("namespace") && p.name == in.at("pod"); });
      return {{"ok", pods_.size() != before}};
    }
    if (cmd == "restart") {
      stop();
      cleanup_directory();
      std::this_thread::sleep_for(std::chrono::milliseconds(in.value("down_ms", 0)));
      start();
      return {{"ok", true}};
    }
    return {{"ok", false}, {"error", "unknown command " + cmd}};
  }

 private:
  json devices_of(const std::string& resource) {
    auto it = plugins_.find(resource);
    return it == plugins_.end() ? json::object() : json(it->second->devices);
  }

  json wait_registered(const std::string& resource, int count) {
    std::unique_lock lock(mutex_);
    const bool done = cv_.wait_for(lock, std::chrono::seconds(20), [&] {
      auto it = plugins_.find(resource);
      return registrations_[resource] >= count && it != plugins_.end() && !it->second->devices.empty();
    });
    if (!done) return {{"ok", false}, {"error", "not registered " + std::to_string(count) + " times"}};
    return {{"ok", true}, {"registrations", registrations_[resource]}};
  }

  json wait_devices(const std::string& resource, int total, int healthy) {
    std::unique_lock lock(mutex_);
    int have_total = -1, have_healthy = -1;
    const bool done = cv_.wait_for(lock, std::chrono::seconds(20), [&] {
      auto it = plugins_.find(resource);
      if (it == plugins_.end()) return false;
      have_total = static_cast<int>(it->second->devices.size());
      have_healthy = static_cast<int>(std::count_if(it->second->devices.begin(), it->second->devices.end(),
                                                    [](const auto& d) { return d.second == "Healthy"; }));
      return (total < 0 || have_total == total) && (healthy < 0 || have_healthy == healthy);
    });
    json out = {{"ok", done}, {"total", have_total}, {"healthy", have_healthy}};
    if (!done) out["error"] = "the device list did not become as asked";
    return out;
  }

  // As the kubelet's admission: the pod is listed (PodResources) from the start, each
  // container's IDs of a resource as soon as the plugin has answered its Allocate; a refusal
  // rejects the pod and nothing of it is kept. Then each container starts (start_container()).
  json admit(const json& in) {
    const std::string ns = in.at("namespace"), name = in.at("pod");
    const std::string pick = in.value("pick", "preferred");
    {
      std::lock_guard lock(mutex_);
      pods_.push_back(Pod{ns, name, {}});
    }
    json answer = {{"ok", true}, {"containers", json::object()}};
    for (const json& c : in.at("containers")) {
      const std::string container = c.at("name");
      with_container(ns, name, "", [&](Pod& pod, Container*) { pod.containers.push_back({container, {}}); });
      std::vector<std::string> order;
      if (c.contains("order")) order = c.at("order").get<std::vector<std::string>>();
      else for (const auto& [r, n] : c.at("requests").items()) order.push_back(r);
      for (const std::string& resource : order) {
        json allocated = allocate(ns, name, container, resource, c.at("requests").at(resource), pick);
        if (!allocated.at("ok")) {
          std::lock_guard lock(mutex_);
          std::erase_if(pods_, [&](const Pod& p) { return p.ns == ns && p.name == name; });
          return allocated;
        }
        answer["containers"][container][resource] = allocated.at("answer");
      }
    }
    for (const json& c : in.at("containers"))
      answer["containers"][c.at("name")]["start"] = start_container(ns, name, c.at("name"));
    return answer;
  }

  // Calls f(pod, container) under the mutex for the pod and its container named so (null
  // when `container` is empty or not found).
  template <typename F>
  void with_container(const std::string& ns, const std::string& pod, const std::string& container, F&& f) {
    std::lock_guard lock(mutex_);
    for (Pod& p : pods_) {
      if (p.ns != ns || p.name != pod) continue;
      Container* found = nullptr;
      for (Container& c : p.containers)
        if (c.name == container) found = &c;
      f(p, found);
    }
  }

  // With the mutex held: the IDs of `resource` some container holds.
  std::set<std::string> held_ids(const std::string& resource) const {
    std::set<std::string> held;
    for (const Pod& p : pods_)
      for (const Container& c : p.containers)
        if (auto d = c.devices.find(resource); d != c.devices.end()) held.insert(d->second.begin(), d->second.end());
    return held;
  }

  // One resource of one container, as the kubelet's devicemanager: the healthy IDs no
  // container holds, GetPreferredAllocation when the plugin offers it and pick is
  // "preferred", the rest as `pick` says, then Allocate; the IDs are the container's after.
  json allocate(const std::string& ns, const std::string& pod, const std::string& container,
                const std::string& resource, int needed, const std::string& pick) {
    std::unique_lock lock(mutex_);
    auto it = plugins_.find(resource);
    if (it == plugins_.end()) return {{"ok", false}, {"error", "cannot allocate unregistered device " + resource}};
    const std::set<std::string> held = held_ids(resource);
    std::vector<std::string> available;
    for (const auto& [id, health] : it->second->devices)
      if (health == "Healthy" && !held.count(id)) available.push_back(id);
    if (static_cast<int>(available.size()) < needed)
      return {{"ok", false},
              {"error", "requested number of devices unavailable for " + resource + ". Requested: " +
                            std::to_string(needed) + ", Available: " + std::to_string(available.size())}};
    auto stub = it->second->stub.get();
    const bool preferred = pick == "preferred" && it->second->options.get_preferred_allocation_available();
    lock.unlock();
    std::vector<std::string> chosen;
    if (preferred)
      if (json e = preferred_ids(stub, available, needed, chosen); !e.at("ok")) return e;
    if (pick == "spread") spread_ids(available, needed, chosen);
    for (const std::string& id : available)
      if (static_cast<int>(chosen.size()) < needed && std::find(chosen.begin(), chosen.end(), id) == chosen.end())
        chosen.push_back(id);
    v1beta1::AllocateRequest request;
    auto* r = request.add_container_requests();
    for (const std::string& id : chosen) r->add_devices_ids(id);
    v1beta1::AllocateResponse response;
    grpc::ClientContext context;
    const grpc::Status s = stub->Allocate(&context, request, &response);
    if (!s.ok()) return {{"ok", false}, {"error", s.error_message()}, {"ids", chosen}};
    if (response.container_responses_size() != 1)
      return {{"ok", false},
              {"error", "Allocate answered for " + std::to_string(response.container_responses_size()) + " containers"}};
    with_container(ns, pod, container, [&](Pod&, Container* c) { c->devices[resource] = chosen; });
    return {{"ok", true}, {"answer", describe(chosen, response.container_responses(0))}};
  }

  // A container's start, as the kubelet's: PreStartContainer for each resource whose plugin
  // asks for it. {"ok": false, "error": ...} when one refuses (the kubelet then tries again
  // later; "start" does that).
  json start_container(const std::string& ns, const std::string& pod, const std::string& container) {
    std::map<std::string, std::vector<std::string>> devices;
    with_container(ns, pod, container, [&](Pod&, Container* c) {
      if (c) devices = c->devices;
    });
    for (const auto& [resource, ids] : devices) {
      v1beta1::DevicePlugin::Stub* stub = nullptr;
      {
        std::lock_guard lock(mutex_);
        auto it = plugins_.find(resource);
        if (it != plugins_.end() && it->second->options.pre_start_required()) stub = it->second->stub.get();
      }
      if (!stub) continue;
      v1beta1::PreStartContainerRequest request;
      for (const std::string& id : ids) request.add_devices_ids(id);
      v1beta1::PreStartContainerResponse response;
      grpc::ClientContext context;
      const grpc::Status s = stub->PreStartContainer(&context, request, &response);
      if (!s.ok()) return {{"ok", false}, {"error", s.error_message()}};
    }
    return {{"ok", true}};
  }

  std::string dir_, pod_socket_;
  RegistrationService registration_;
  PodResourcesService pod_resources_;
  std::unique_ptr<grpc::Server> registration_server_, pod_server_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::string, std::unique_ptr<Plugin>> plugins_;
  std::map<std::string, int> registrations_;
  uint64_t updates_ = 0;
  std::vector<Pod> pods_;
};

grpc::Status RegistrationService::Register(grpc::ServerContext*, const v1beta1::RegisterRequest* request,
                                           v1beta1::Empty*) {
  return kubelet_.on_register(*request);
}

grpc::Status PodResourcesService::List(grpc::ServerContext*, const v1::ListPodResourcesRequest*,
                                       v1::ListPodResourcesResponse* out) {
  return kubelet_.list(*out);
}

grpc::Status PodResourcesService::Get(grpc::ServerContext*, const v1::GetPodResourcesRequest* request,
                                      v1::GetPodResourcesResponse* out) {
  return kubelet_.get(*request, *out);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, pod_socket;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--plugin-dir") dir = argv[i + 1];
    else if (flag == "--pod-resources-socket") pod_socket = argv[i + 1];
  }
  if (dir.empty() || pod_socket.empty()) {
    std::cerr << "usage: fake_kubelet --plugin-dir DIR --pod-resources-socket PATH\n";
    return 2;
  }
  TestKubelet kubelet(dir, pod_socket);
  kubelet.start();
  std::cout << json{{"ok", true}, {"ready", true}}.dump() << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    json answer;
    try {
      const json in = json::parse(line);
      if (in.at("cmd") == "quit") break;
      answer = kubelet.command(in);
    } catch (const std::exception& e) {
      answer = {{"ok", false}, {"error", std::string("bad command: ") + e.what()}};
    }
    std::cout << answer.dump() << std::endl;
  }
  kubelet.stop();
  return 0;
}
