#include "common/cdi_spec.h"

namespace cuslice {
namespace {

using json = nlohmann::ordered_json;

json mount_options(bool read_only) {
  return read_only ? json::array({"ro", "nosuid", "nodev", "bind"})
                   : json::array({"rw", "nosuid", "nodev", "noexec", "bind"});
}

json container_edits(const ContainerEdits& edits) {
  json env = json::array();
  for (const auto& [name, value] : edits.env) env.push_back(name + "=" + value);
  json mounts = json::array();
  for (const Mount& m : edits.mounts)
    mounts.push_back(
        {{"hostPath", m.host_path}, {"containerPath", m.container_path}, {"options", mount_options(m.read_only)}});
  json out = {{"env", env}, {"mounts", mounts}};
  if (edits.devices.empty()) return out;
  json nodes = json::array();
  for (const DeviceNode& d : edits.devices) nodes.push_back({{"path", d.container_path}, {"hostPath", d.host_path}});
  out["deviceNodes"] = nodes;
  return out;
}

}  // namespace

json cdi_spec(std::string_view kind, const std::string& device_name, const ContainerEdits& edits) {
  return {{"cdiVersion", kCdiVersion},
          {"kind", kind},
          {"devices", json::array({{{"name", device_name}, {"containerEdits", container_edits(edits)}}})}};
}

}  // namespace cuslice
