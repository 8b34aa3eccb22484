#include "dra_plugin/cdi_spec.h"

namespace cuslice::dra {

std::string cdi_device_id(const std::string& claim_uid) { return std::string(kCdiKind) + "=" + claim_uid; }

std::string cdi_spec_path(const std::string& cdi_dir, const std::string& claim_uid) {
  return cdi_dir + "/gpu.cuslice.io-claim_" + claim_uid + ".json";
}

nlohmann::ordered_json cdi_spec(const std::string& claim_uid, const node::ContainerEdits& edits) {
  using json = nlohmann::ordered_json;
  json env = json::array();
  for (const auto& [name, value] : edits.env) env.push_back(name + "=" + value);
  json mounts = json::array();
  for (const node::Mount& m : edits.mounts)
    mounts.push_back({{"hostPath", m.host_path},
                      {"containerPath", m.container_path},
                      {"options", m.read_only ? json::array({"ro", "nosuid", "nodev", "bind"})
                                              : json::array({"rw", "nosuid", "nodev", "bind"})}});
  json nodes = json::array();
  for (const node::DeviceNode& d : edits.devices) nodes.push_back({{"path", d.container_path}, {"hostPath", d.host_path}});
  json container_edits = {{"env", env}, {"mounts", mounts}};
  if (!nodes.empty()) container_edits["deviceNodes"] = nodes;
  return {{"cdiVersion", kCdiVersion},
          {"kind", kCdiKind},
          {"devices", json::array({{{"name", claim_uid}, {"containerEdits", container_edits}}})}};
}

}  // namespace cuslice::dra
