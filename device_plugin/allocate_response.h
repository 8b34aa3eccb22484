// What the kubelet puts into a container for each Allocate answer: the environment, mounts
// and device nodes that make the container's processes a tenant of its own on its GPU.
//
// The hook reaches the container without a hostPath in the pod spec: the memory answer
// mounts, read-only, the hook as /opt/cuslice/lib/libcuslice.so and a file naming it as
// /etc/ld.so.preload (the dynamic loader preloads it into every program, whatever the
// image's entrypoint, and the container cannot remove it), the scheduler's socket directory
// as /run/cuslice, and, read-write, the scheduler's segment at /dev/shm/<name> (the hook
// writes its own counters there). docs/kubernetes.md explains each.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "deviceplugin_v1beta1.pb.h"
#include "ledger.h"

namespace cuslice::device_plugin {

struct ResponseOptions {
  std::string hook_host_path;     // libcuslice.so on the node
  std::string hook_container_path = "/opt/cuslice/lib/libcuslice.so";
  std::string preload_host_path;  // a file naming hook_container_path; empty: no /etc/ld.so.preload
  std::string socket_host_path;   // the scheduler's socket on the node; its directory is mounted
  std::string socket_container_dir = "/run/cuslice";
  std::string shm_name = "/cuslice";
  std::string dev_root = "/dev";  // where the NVIDIA device nodes are looked for
  std::string cdi_kind;           // e.g. nvidia.com/gpu: also name the GPU as a CDI device; empty: no
};

// The answer to a memory Allocate: the tenant `allocation` names, on its GPU (`minor`: the
// GPU's /dev/nvidia<minor>, when known).
v1beta1::ContainerAllocateResponse memory_response(const Allocation& allocation, std::optional<uint32_t> minor,
                                                   const ResponseOptions& options);
// The answer to a compute Allocate: informational environment only (the share reaches the
// scheduler from the plugin, once the kubelet says whose container it is).
v1beta1::ContainerAllocateResponse compute_response(size_t percent);

// The one line /etc/ld.so.preload holds.
std::string preload_file_text(const ResponseOptions& options);

}  // namespace cuslice::device_plugin
