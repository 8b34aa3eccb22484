// The Container Device Interface (CDI) spec that makes containers cuslice tenants.
//
// A CDI-aware runtime (containerd, CRI-O, Podman, Docker 25+) applies a device's
// containerEdits when a container asks for it, e.g. `--device cuslice.io/gpu=all`. The GPU
// device nodes themselves come from NVIDIA's own CDI spec (nvidia.com/gpu=...); cuslice's
// device adds what makes the container a tenant:
//   - the hook library, bind-mounted read-only at kContainerHookPath;
//   - the scheduler's socket directory, bind-mounted at kContainerSocketDir;
//   - the scheduler's shared-memory segment (/dev/shm/cuslice), bind-mounted at the same
//     path: the hook shm_open()s the name the scheduler gives it, in the container's own
//     /dev/shm. Only that file is shared, never the host's whole /dev/shm;
//   - LD_PRELOAD=kContainerHookPath and CUSLICE_SOCKET=<container socket dir>/cuslice.sock.
// The scheduler recreates its segment when it starts, so containers started before a
// scheduler restart keep the old one: restart them too (docs/reference/operations.md).
// CDI can only set a variable, not append to it, so LD_PRELOAD replaces whatever the image
// set. Images that preload something of their own should use the entrypoint wrapper in
// deploy/container/ instead, which appends (see deploy/container/README.md).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/cdi_spec.h"

namespace cuslice::cli {

inline constexpr const char* kCdiKind = "cuslice.io/gpu";
inline constexpr const char* kCdiDefaultDeviceName = "all";
inline constexpr const char* kContainerHookPath = "/opt/cuslice/lib/libcuslice.so";

struct CdiSpecInput {
  std::filesystem::path hook_host_path;  // absolute
  // The directory of the scheduler's socket, absolute. The socket keeps its default file
  // name (wire::kDefaultSocketPath); only its directory differs between hosts.
  std::filesystem::path socket_host_dir;
  std::string shm_name;  // the scheduler's --shm-name, as given to shm_open: "/cuslice"
  std::string device_name = kCdiDefaultDeviceName;
};

// Why `name` cannot be a shared-memory name for shm_open ("/" then a file name, shorter than
// the protocol's name field), or an empty string if it can.
std::string shm_name_problem(std::string_view name);

// Why `name` cannot name a CDI device (letters, digits, '_', '-', '.', ':', starting with a
// letter or digit), or an empty string if it can.
std::string cdi_device_name_problem(std::string_view name);

// The spec (common/cdi_spec.h builds it from the device's edits).
nlohmann::ordered_json make_cdi_spec(const CdiSpecInput& input);

}  // namespace cuslice::cli
