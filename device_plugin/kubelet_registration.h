// Registering a resource with the kubelet (Registration.Register on <plugin dir>/kubelet.sock),
// and noticing when the kubelet restarts.
//
// The kubelet answers Register only after it has dialled the plugin's endpoint and asked for
// its options, so the endpoint must be serving first. A restarting kubelet removes every
// socket in the plugin directory (the plugin's too) and creates kubelet.sock anew; the plugin
// must then serve again and register again (docs/reference/kubernetes.md, troubleshooting).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "common/unique_fd.h"

namespace cuslice::device_plugin {

// Registers `resource` served on <dir>/<endpoint>; "" on success, else the kubelet's reason.
std::string register_with_kubelet(const std::string& kubelet_socket, const std::string& endpoint,
                                  const std::string& resource);

// The identity (device, inode) of a socket file, to tell a recreated one from the old one;
// nullopt when there is none.
struct FileIdentity {
  dev_t device = 0;
  ino_t inode = 0;
  bool operator==(const FileIdentity&) const = default;
};
std::optional<FileIdentity> socket_identity(const std::string& path);

// Watches the plugin directory (inotify) so the control loop wakes when a socket appears or
// goes; the loop checks the sockets themselves, so a missed event only costs a poll period.
class DirectoryWatch {
 public:
  explicit DirectoryWatch(const std::string& dir);
  // Waits up to `timeout_ms` for a change; true when something changed.
  bool wait(int timeout_ms);

 private:
  UniqueFd fd_;  // -1 where inotify failed: wait() then only sleeps
};

}  // namespace cuslice::device_plugin
