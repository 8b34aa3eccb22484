// What a container needs to be a tenant of the node's cuslice-scheduler: the environment that
// names its tenant and GPUs, the mounts that bring the hook, the preload file, the scheduler's
// socket directory and segment, and the NVIDIA device nodes. One list, which the device plugin
// turns into an Allocate answer and the DRA driver into a CDI spec, so both give containers
// the very same things.
//
// The hook reaches the container without a hostPath in the pod spec: it is mounted,
// read-only, as /opt/cuslice/lib/libcuslice.so with a file naming it as /etc/ld.so.preload (the
// dynamic loader preloads it into every program, whatever the image's entrypoint, and the
// container cannot remove it), the scheduler's socket directory as /run/cuslice, and the
// segment at /dev/shm/<name>. docs/reference/kubernetes.md explains each.
//
// Pure but for stat() on device nodes; knows nothing of the kubelet or of allocations.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cuslice {

// Where things are on the node, and where containers see them.
struct MountOptions {
  std::string hook_host_path;     // libcuslice.so on the node
  std::string hook_container_path = "/opt/cuslice/lib/libcuslice.so";
  std::string preload_host_path;  // a file naming hook_container_path; empty: no /etc/ld.so.preload
  std::string socket_host_path;   // the scheduler's socket on the node; its directory is mounted
  std::string socket_container_dir = "/run/cuslice";
  std::string shm_name = "/cuslice";
  std::string dev_root = "/dev";  // where the NVIDIA device nodes are looked for
};

struct Mount {
  std::string host_path;
  std::string container_path;
  bool read_only = true;  // else writable, and nothing in it may run (common/cdi_spec.h)
};

struct DeviceNode {
  std::string host_path;
  std::string container_path;
};

struct ContainerEdits {
  // In the order a CDI spec lists them (name, value).
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<Mount> mounts;
  std::vector<DeviceNode> devices;  // only those the node has
};

// One GPU the tenant is on.
struct TenantGpu {
  uint32_t index = 0;             // NVML's index on the node: the scheduler's GPU number
  std::string uuid;
  std::optional<uint32_t> minor;  // /dev/nvidia<minor>; the index when unknown
};

// The edits for tenant `name` joined with `key`, on `gpus` (in the order CUDA numbers them in
// the container), each with `memory_bytes` of quota.
ContainerEdits tenant_edits(const std::string& name, const std::string& key, const std::vector<TenantGpu>& gpus,
                            uint64_t memory_bytes, const MountOptions& options);

// The one line /etc/ld.so.preload holds.
std::string preload_file_text(const MountOptions& options);

// Checks --shm-name, completes the control socket's default beside the tenant socket, and makes
// sure containers, which are given the tenant socket's directory, never see the control socket.
// "" on success, else why not (for an option error).
std::string settle_scheduler_paths(MountOptions& options, const std::string& scheduler_socket,
                                   bool control_socket_given, std::string& control_socket);

// Checks that the hook exists and writes `preload_file` (unless empty) naming it, then records
// it in `options`. 0, or an exit status (2: bad option, 1: cannot write) with `why`.
int provide_hook(MountOptions& options, const std::string& preload_file, std::string& why);

}  // namespace cuslice
