#include "device_plugin/allocate_response.h"

namespace cuslice::device_plugin {

v1beta1::ContainerAllocateResponse memory_response(const Allocation& a, std::optional<uint32_t> minor,
                                                   const ResponseOptions& o) {
  const ContainerEdits edits =
      tenant_edits(a.tenant, a.key, {{a.gpu, a.gpu_uuid, minor}}, a.memory_bytes(), o);
  v1beta1::ContainerAllocateResponse r;
  r.mutable_envs()->insert(edits.env.begin(), edits.env.end());
  for (const Mount& m : edits.mounts) {
    v1beta1::Mount* out = r.add_mounts();
    out->set_host_path(m.host_path);
    out->set_container_path(m.container_path);
    out->set_read_only(m.read_only);
  }
  for (const DeviceNode& d : edits.devices) {
    v1beta1::DeviceSpec* out = r.add_devices();
    out->set_host_path(d.host_path);
    out->set_container_path(d.container_path);
    out->set_permissions("rw");
  }
  if (!o.cdi_kind.empty()) r.add_cdi_devices()->set_name(o.cdi_kind + "=" + std::to_string(a.gpu));
  return r;
}

v1beta1::ContainerAllocateResponse compute_response(size_t percent) {
  v1beta1::ContainerAllocateResponse r;
  (*r.mutable_envs())["CUSLICE_COMPUTE_SHARE"] = std::to_string(percent) + "%";
  return r;
}

}  // namespace cuslice::device_plugin
