#include "allocate_response.h"

#include <sys/stat.h>

#include <filesystem>

#include "device_ids.h"
#include "socket_protocol.h"

namespace cuslice::device_plugin {
namespace {

void add_mount(v1beta1::ContainerAllocateResponse& r, const std::string& host, const std::string& container,
               bool read_only) {
  v1beta1::Mount* m = r.add_mounts();
  m->set_host_path(host);
  m->set_container_path(container);
  m->set_read_only(read_only);
}

// A device node, when the node has it (a test machine has none).
void add_device(v1beta1::ContainerAllocateResponse& r, const std::string& dev_root, const std::string& name) {
  const std::string host = dev_root + "/" + name;
  struct stat st {};
  if (stat(host.c_str(), &st) != 0) return;
  v1beta1::DeviceSpec* d = r.add_devices();
  d->set_host_path(host);
  d->set_container_path("/dev/" + name);
  d->set_permissions("rw");
}

}  // namespace

std::string preload_file_text(const ResponseOptions& options) { return options.hook_container_path + "\n"; }

v1beta1::ContainerAllocateResponse memory_response(const Allocation& a, std::optional<uint32_t> minor,
                                                   const ResponseOptions& o) {
  v1beta1::ContainerAllocateResponse r;
  const std::filesystem::path socket(o.socket_host_path);
  auto& env = *r.mutable_envs();
  env[wire::kTenantEnv] = a.tenant + wire::kTenantKeySeparator + a.key;
  env[wire::kSocketEnv] = o.socket_container_dir + "/" + socket.filename().string();
  // Inside the container NVML numbers the one GPU it sees 0; the scheduler numbers GPUs as
  // the node does.
  env["CUSLICE_GPU_INDICES"] = std::to_string(a.gpu);
  // The quota also as the process's own limit: it holds even while the scheduler is away.
  env["CUSLICE_MEMORY_LIMIT"] = std::to_string(a.memory_bytes());
  // For the NVIDIA container runtime, which then mounts the driver's libraries.
  env["NVIDIA_VISIBLE_DEVICES"] = a.gpu_uuid;

  add_mount(r, o.hook_host_path, o.hook_container_path, true);
  if (!o.preload_host_path.empty()) add_mount(r, o.preload_host_path, "/etc/ld.so.preload", true);
  add_mount(r, socket.parent_path().string(), o.socket_container_dir, true);
  // Read-only: hooks only read the segment; what a tenant writes is its own region, which
  // the scheduler hands over the socket.
  add_mount(r, "/dev/shm" + o.shm_name, "/dev/shm" + o.shm_name, true);

  for (const char* node : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}) add_device(r, o.dev_root, node);
  add_device(r, o.dev_root, "nvidia" + std::to_string(minor.value_or(a.gpu)));
  if (!o.cdi_kind.empty()) r.add_cdi_devices()->set_name(o.cdi_kind + "=" + std::to_string(a.gpu));
  return r;
}

v1beta1::ContainerAllocateResponse compute_response(size_t percent) {
  v1beta1::ContainerAllocateResponse r;
  (*r.mutable_envs())["CUSLICE_COMPUTE_SHARE"] = std::to_string(percent) + "%";
  return r;
}

}  // namespace cuslice::device_plugin
