// Replacing a file so that readers see the old content or the new, never a part.
//
// Container runtimes watch /etc/cdi and /var/run/cdi and reload specs when they change; a
// spec written in place could be read half-written (common/atomic_file.h says how it is not).
#pragma once

#include <filesystem>
#include <string_view>

namespace cuslice::cli {

// Writes `content` to `target` (mode 0644). Throws Error (ExitCode::kFailure) naming the file
// and the system's reason; on failure `target` is left as it was.
void write_file_atomically(const std::filesystem::path& target, std::string_view content);

}  // namespace cuslice::cli
