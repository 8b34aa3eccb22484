// Where a user's own scheduler lives when the node runs none: a private runtime directory.
//
// $XDG_RUNTIME_DIR/cuslice when the session has a runtime directory of this user (systemd
// logind gives one at /run/user/<uid>), else /tmp/cuslice-<uid>. The directory is created
// mode 0700 and, before anything in it is trusted, checked to be a real directory (not a
// symbolic link) owned by the user and closed to everyone else: in a shared /tmp another
// user could have created the name first to plant a socket of their own. /tmp's sticky bit
// then keeps others from renaming or replacing it.
#pragma once

#include <filesystem>

namespace cuslice::cli {

// The directory's path; nothing is created or checked.
std::filesystem::path user_runtime_dir_path();

// The check alone, for a directory that exists or is created here with mode 0700: a
// directory owned by the effective uid with no permission bits for group or others.
// Throws Error (kFailure).
void ensure_private_dir(const std::filesystem::path& dir);

}  // namespace cuslice::cli
