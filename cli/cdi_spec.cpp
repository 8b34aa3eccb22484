#include "cdi_spec.h"

namespace cuslice::cli {
namespace {

bool is_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

}  // namespace

std::string cdi_device_name_problem(std::string_view name) {
  if (name.empty()) return "a CDI device name cannot be empty";
  if (!is_alnum(name.front())) return "a CDI device name starts with a letter or a digit";
  for (const char c : name)
    if (!is_alnum(c) && c != '_' && c != '-' && c != '.' && c != ':')
      return "a CDI device name has only letters, digits, '_', '-', '.' and ':'";
  return {};
}

nlohmann::ordered_json make_cdi_spec(const CdiSpecInput& input) {
  using json = nlohmann::ordered_json;
  const std::string container_socket =
      (std::filesystem::path(kContainerSocketDir) / kSocketFileName).string();

  json edits;
  edits["env"] = json::array({
      std::string("LD_PRELOAD=") + kContainerHookPath,
      "CUSLICE_SOCKET=" + container_socket,
  });
  edits["mounts"] = json::array({
      // Read-only: a tenant must not be able to replace the code that enforces its quota for
      // the other containers sharing the file.
      json{{"hostPath", input.hook_host_path.string()},
           {"containerPath", kContainerHookPath},
           {"options", json::array({"ro", "nosuid", "nodev", "bind"})}},
      // The directory, not the socket file: the scheduler recreates the socket when it
      // restarts, and a bind mount of the old file would keep pointing at a dead inode.
      json{{"hostPath", input.socket_host_dir.string()},
           {"containerPath", kContainerSocketDir},
           {"options", json::array({"rw", "nosuid", "nodev", "noexec", "bind"})}},
  });

  json spec;
  spec["cdiVersion"] = kCdiVersion;
  spec["kind"] = kCdiKind;
  spec["devices"] = json::array({json{{"name", input.device_name}, {"containerEdits", edits}}});
  return spec;
}

}  // namespace cuslice::cli
