#include "device_plugin/kubelet_registration.h"

#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <thread>

#include "device_plugin/proto/deviceplugin_v1beta1.grpc.pb.h"

namespace cuslice::device_plugin {

std::string register_with_kubelet(const std::string& kubelet_socket, const std::string& endpoint,
                                  const std::string& resource) {
  auto channel = grpc::CreateChannel("unix:" + kubelet_socket, grpc::InsecureChannelCredentials());
  auto stub = v1beta1::Registration::NewStub(channel);
  v1beta1::RegisterRequest request;
  request.set_version("v1beta1");
  request.set_endpoint(endpoint);
  request.set_resource_name(resource);
  request.mutable_options()->set_get_preferred_allocation_available(true);
  request.mutable_options()->set_pre_start_required(false);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1beta1::Empty reply;
  const grpc::Status status = stub->Register(&context, request, &reply);
  return status.ok() ? "" : status.error_message().empty() ? "code " + std::to_string(status.error_code())
                                                            : status.error_message();
}

std::optional<FileIdentity> socket_identity(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return std::nullopt;
  return FileIdentity{st.st_dev, st.st_ino};
}

DirectoryWatch::DirectoryWatch(const std::string& dir) : fd_(inotify_init1(IN_CLOEXEC | IN_NONBLOCK)) {
  if (fd_.get() >= 0 &&
      inotify_add_watch(fd_.get(), dir.c_str(), IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM) < 0)
    fd_.reset();
}

bool DirectoryWatch::wait(int timeout_ms) {
  if (fd_.get() < 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
    return false;
  }
  pollfd p{fd_.get(), POLLIN, 0};
  if (poll(&p, 1, timeout_ms) <= 0) return false;
  alignas(inotify_event) char buf[4096];
  while (read(fd_.get(), buf, sizeof buf) > 0) {
  }
  return true;
}

}  // namespace cuslice::device_plugin
