#include "cli/cdi_spec.h"

#include "protocol/socket_protocol.h"

namespace cuslice::cli {
namespace {

bool is_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

}  // namespace

std::string shm_name_problem(std::string_view name) {
  if (name.size() < 2 || name.front() != '/' || name.find('/', 1) != std::string_view::npos)
    return "a shared-memory name is '/' followed by a file name, e.g. /cuslice";
  if (name.size() >= shm::kNameSize)
    return "a shared-memory name is shorter than " + std::to_string(shm::kNameSize) + " characters";
  return {};
}

std::string cdi_device_name_problem(std::string_view name) {
  if (name.empty()) return "a CDI device name cannot be empty";
  if (!is_alnum(name.front())) return "a CDI device name starts with a letter or a digit";
  for (const char c : name)
    if (!is_alnum(c) && c != '_' && c != '-' && c != '.' && c != ':')
      return "a CDI device name has only letters, digits, '_', '-', '.' and ':'";
  return {};
}

nlohmann::ordered_json make_cdi_spec(const CdiSpecInput& input) {
  // Inside the container the socket is where the hook looks by default, whatever the host
  // calls it; CUSLICE_SOCKET is still set so that the hook need not share that default.
  const std::filesystem::path container_socket = wire::kDefaultSocketPath;
  // glibc's shm_open("/name") opens /dev/shm/name, on the host and in the container alike.
  const std::string shm_path = "/dev/shm" + input.shm_name;

  ContainerEdits edits;
  edits.env = {{"LD_PRELOAD", kContainerHookPath}, {wire::kSocketEnv, container_socket.string()}};
  edits.mounts = {
      // Read-only: a tenant must not be able to replace the code that enforces its quota for
      // the other containers sharing the file.
      {input.hook_host_path.string(), kContainerHookPath, true},
      // The directory, not the socket file: the scheduler recreates the socket when it
      // restarts, and a bind mount of the old file would keep pointing at a dead inode.
      {input.socket_host_dir.string(), container_socket.parent_path().string(), false},
      {shm_path, shm_path, false},
  };
  return cdi_spec(kCdiKind, input.device_name, edits);
}

}  // namespace cuslice::cli
