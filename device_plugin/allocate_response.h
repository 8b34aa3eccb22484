// What the kubelet puts into a container for each Allocate answer: the edits that make the
// container's processes a tenant of its own on its GPU (common/container_edits.h), as the
// device plugin API writes them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/container_edits.h"
#include "device_plugin/ledger.h"
#include "device_plugin/proto/deviceplugin_v1beta1.pb.h"

namespace cuslice::device_plugin {

struct ResponseOptions : MountOptions {
  std::string cdi_kind;  // e.g. nvidia.com/gpu: also name the GPU as a CDI device; empty: no
};

// The answer to a memory Allocate: the tenant `allocation` names, on its GPU (`minor`: the
// GPU's /dev/nvidia<minor>, when known).
v1beta1::ContainerAllocateResponse memory_response(const Allocation& allocation, std::optional<uint32_t> minor,
                                                   const ResponseOptions& options);
// The answer to a compute Allocate: informational environment only (the share reaches the
// scheduler from the plugin, once the kubelet says whose container it is).
v1beta1::ContainerAllocateResponse compute_response(size_t percent);

}  // namespace cuslice::device_plugin
