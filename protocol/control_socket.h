// Where a scheduler's control socket is (socket_protocol.h, "Two sockets"), shared by the
// scheduler, `cuslice` and the device plugin so that all three find the same one. Not for
// the hook: hooks never use the control socket.
//
// The tenant socket's directory is what containers are given (the device plugin and the CDI
// spec mount it), so the control socket must never be in it, nor below it. Unless told
// otherwise it has the tenant socket's name in a directory of its own beside the tenant
// socket's, named after it with "-control":
//   /run/cuslice/cuslice.sock              -> /run/cuslice-control/cuslice.sock
//   /run/user/1000/cuslice/cuslice.sock    -> /run/user/1000/cuslice-control/cuslice.sock
//   /tmp/cuslice-1000/cuslice.sock         -> /tmp/cuslice-1000-control/cuslice.sock
#pragma once

#include <filesystem>
#include <string>

namespace cuslice::wire {

inline constexpr const char* kDefaultControlSocketPath = "/run/cuslice-control/cuslice.sock";
inline constexpr const char* kControlSocketEnv = "CUSLICE_CONTROL_SOCKET";

// The default control socket of the tenant socket `socket_path`; empty when it has none: a
// socket directly in "/" or with no directory in its path (give one explicitly then).
inline std::string default_control_socket(const std::string& socket_path) {
  const std::filesystem::path socket = std::filesystem::path(socket_path).lexically_normal();
  const std::filesystem::path dir = socket.parent_path();
  const std::string dir_name = dir.filename().string();
  if (!socket.has_filename() || dir_name.empty() || dir_name == "." || dir_name == "..") return {};
  return (dir.parent_path() / (dir_name + "-control") / socket.filename()).string();
}

// Whether the directory of `control_path` is the directory of `socket_path` or lies below
// it, where whoever is given the tenant socket's directory would find it. Both are compared
// as absolute paths with symbolic links of their existing parts resolved.
inline bool control_socket_exposed(const std::string& socket_path, const std::string& control_path) {
  std::error_code ec;
  const auto resolved_dir = [&ec](const std::string& path) {
    const std::filesystem::path dir = std::filesystem::absolute(path, ec).parent_path();
    const std::filesystem::path resolved = std::filesystem::weakly_canonical(dir, ec);
    return ec ? dir.lexically_normal() : resolved;
  };
  const std::filesystem::path tenant_dir = resolved_dir(socket_path);
  const std::filesystem::path control_dir = resolved_dir(control_path);
  const std::filesystem::path rest = control_dir.lexically_relative(tenant_dir);
  return !rest.empty() && *rest.begin() != "..";
}

}  // namespace cuslice::wire
