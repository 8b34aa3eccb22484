#include "common/container_edits.h"

#include <sys/stat.h>

#include <filesystem>

#include "common/atomic_file.h"
#include "protocol/control_socket.h"
#include "protocol/socket_protocol.h"

namespace cuslice {
namespace {

// A device node, when the node has it (a test machine has none).
void add_device(ContainerEdits& e, const std::string& dev_root, const std::string& name) {
  const std::string host = dev_root + "/" + name;
  struct stat st {};
  if (stat(host.c_str(), &st) != 0) return;
  e.devices.push_back({host, "/dev/" + name});
}

std::string joined(const std::vector<TenantGpu>& gpus, bool uuids) {
  std::string out;
  for (const TenantGpu& g : gpus) out += (out.empty() ? "" : ",") + (uuids ? g.uuid : std::to_string(g.index));
  return out;
}

}  // namespace

std::string preload_file_text(const MountOptions& options) { return options.hook_container_path + "\n"; }

ContainerEdits tenant_edits(const std::string& name, const std::string& key, const std::vector<TenantGpu>& gpus,
                            uint64_t memory_bytes, const MountOptions& o) {
  ContainerEdits e;
  const std::filesystem::path socket(o.socket_host_path);
  // The variables go in the order of their names, which is the order a claim's CDI spec
  // lists them. Inside the container NVML numbers the GPUs it sees from 0; the scheduler numbers GPUs as
  // the node does.
  e.env.emplace_back("CUSLICE_GPU_INDICES", joined(gpus, false));
  // The quota also as the process's own limit: it holds even while the scheduler is away.
  e.env.emplace_back("CUSLICE_MEMORY_LIMIT", std::to_string(memory_bytes));
  e.env.emplace_back(wire::kSocketEnv, o.socket_container_dir + "/" + socket.filename().string());
  e.env.emplace_back(wire::kTenantEnv, name + wire::kTenantKeySeparator + key);
  // For the NVIDIA container runtime, which then mounts the driver's libraries.
  e.env.emplace_back("NVIDIA_VISIBLE_DEVICES", joined(gpus, true));

  e.mounts.push_back({o.hook_host_path, o.hook_container_path, true});
  if (!o.preload_host_path.empty()) e.mounts.push_back({o.preload_host_path, "/etc/ld.so.preload", true});
  e.mounts.push_back({socket.parent_path().string(), o.socket_container_dir, true});
  // Read-only: hooks only read the segment; what a tenant writes is its own region, which
  // the scheduler hands over the socket.
  e.mounts.push_back({"/dev/shm" + o.shm_name, "/dev/shm" + o.shm_name, true});

  for (const char* node : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}) add_device(e, o.dev_root, node);
  for (const TenantGpu& g : gpus) add_device(e, o.dev_root, "nvidia" + std::to_string(g.minor.value_or(g.index)));
  return e;
}

std::string settle_scheduler_paths(MountOptions& options, const std::string& scheduler_socket,
                                   bool control_socket_given, std::string& control_socket) {
  if (options.shm_name.empty() || options.shm_name[0] != '/' || options.shm_name.find('/', 1) != std::string::npos)
    return "--shm-name must be one '/' followed by a name, e.g. /cuslice";
  options.socket_host_path = scheduler_socket;
  if (!control_socket_given)
    control_socket = wire::default_control_socket(std::filesystem::absolute(scheduler_socket).string());
  if (control_socket.empty())
    return "--scheduler-socket " + scheduler_socket +
           " has no directory beside which the control socket could be; give --scheduler-control-socket";
  // Containers are given the tenant socket's directory.
  if (wire::control_socket_exposed(scheduler_socket, control_socket))
    return "--scheduler-control-socket " + control_socket + " is in the directory of --scheduler-socket " +
           scheduler_socket + " (or below it), which every container is given";
  return "";
}

int provide_hook(MountOptions& options, const std::string& preload_file, std::string& why) {
  if (!std::filesystem::is_regular_file(options.hook_host_path)) {
    why = "--hook " + options.hook_host_path + ": no such file; containers would get no hook";
    return 2;
  }
  if (preload_file.empty()) return 0;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(preload_file).parent_path(), ec);
  if (!write_if_changed(preload_file, preload_file_text(options), why)) {
    why = "--preload-file: " + why;
    return 1;
  }
  options.preload_host_path = preload_file;
  return 0;
}

}  // namespace cuslice
