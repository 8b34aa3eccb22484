// Replacing a file that others read while it changes (a CDI spec the container runtime
// reloads, a file mounted into containers, a checkpoint): the new content goes to a temporary
// file in the same directory, is flushed to disk, then rename(2)d over the target, so a reader
// sees the old content or the new, never a part, even after a crash.
//
// Shared by the `cuslice` tool and the Kubernetes node agents. No exceptions.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

namespace cuslice {

// Writes `content` to `target` with `mode`. 0, or the errno of the step that failed; on
// failure `target` is left as it was.
int write_file(const std::string& target, std::string_view content, mode_t mode = 0644);

// Writes `text` to `path` with `mode` unless it already holds it, with no permission beyond
// `mode`: a file mounted into containers must not change under them without need, and one
// left more open (by an older version) is replaced. False with `why` when it cannot.
bool write_if_changed(const std::string& path, const std::string& text, std::string& why, mode_t mode = 0644);

// Reads the whole file; false when it cannot be opened.
bool read_file(const std::string& path, std::string& text);

}  // namespace cuslice
