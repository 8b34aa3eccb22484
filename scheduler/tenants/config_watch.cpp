#include "scheduler/tenants/config_watch.h"

#include <sys/inotify.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "scheduler/os/os_fds.h"

namespace cuslice {

ConfigWatch::ConfigWatch(const std::string& path) {
  const std::filesystem::path file(path);
  name_ = file.filename().string();
  fd_.reset(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (fd_.get() < 0) throw_errno("inotify_init1");
  const std::string dir = file.parent_path().empty() ? "." : file.parent_path().string();
  if (inotify_add_watch(fd_.get(), dir.c_str(), IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE) < 0) {
    fd_.reset();
    throw_errno("inotify_add_watch " + dir);
  }
}

bool ConfigWatch::changed() {
  bool changed = false;
  alignas(inotify_event) char buf[4096];
  for (;;) {
    const ssize_t n = read(fd_.get(), buf, sizeof buf);
    if (n <= 0) return changed;
    for (ssize_t at = 0; at < n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(buf + at);
      const char* name = e->len ? e->name : "";
      // The file itself, or the ConfigMap's `..data` link it resolves through.
      if (name_ == name || std::strcmp(name, "..data") == 0) changed = true;
      at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
    }
  }
}

}  // namespace cuslice
