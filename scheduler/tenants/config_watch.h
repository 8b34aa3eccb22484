// Reloading the configuration when its file changes (cuslice-scheduler --watch-config), so
// that a Kubernetes ConfigMap edited with kubectl reaches every node's scheduler without a
// signal. The kubelet updates a mounted ConfigMap by writing a new directory and renaming the
// `..data` link onto it; editors save by rename or by rewriting the file. inotify on the
// file's directory sees all of these; the daemon then reloads as on SIGHUP (a bad file is
// refused and the running configuration stays).
#pragma once

#include <string>

#include "common/unique_fd.h"

namespace cuslice {

class ConfigWatch {
 public:
  // Watches the directory of `path`; throws std::system_error when inotify cannot.
  explicit ConfigWatch(const std::string& path);

  int fd() const { return fd_.get(); }
  // Reads every pending event; true when one may have changed the file's content.
  bool changed();

 private:
  UniqueFd fd_;
  std::string name_;  // the file's name in its directory
};

}  // namespace cuslice
