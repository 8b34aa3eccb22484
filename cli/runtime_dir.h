// Where a user's own scheduler lives when the node runs none: a private runtime directory.
//
// $XDG_RUNTIME_DIR/cuslice when the session has a runtime directory of this user (systemd
// logind gives one at /run/user/<uid>), else /tmp/cuslice-<uid>; its control socket goes in
// the sibling <dir>-control. The directory is created mode 0700 and, before anything in it is
// trusted, checked to be a real directory (not a symbolic link) owned by the user and closed
// to everyone else: in a shared /tmp another user could have created the name first to plant
// a socket of their own. /tmp's sticky bit then keeps others from renaming or replacing it.
//
// A name someone else took first must not stop the user either (they cannot remove it from a
// sticky /tmp). When the directory or its control sibling exists and is not the user's own
// and private, cuslice passes over both for a fallback beside them: <dir>-XXXXXX, made by
// mkdtemp (mode 0700, a name nobody knows beforehand), holding the socket's directory run/ and
// its control sibling run-control/, which nobody else can enter to take. Nothing records it:
// the user's next commands find it again as the directory named so, owned by the user and
// private, the first by name when a race made several; others cannot make one that passes.
#pragma once

#include <filesystem>

namespace cuslice::cli {

// The default directory's path; nothing is created or checked.
std::filesystem::path user_runtime_dir_path();

// The directory of the user's own socket: user_runtime_dir_path() when it and its control
// sibling are each absent or the user's own and private; else the fallback's run/, the
// fallback made now (empty) when there is none yet. run/ itself is left to be created.
// Throws Error (kFailure) when no fallback can be made.
std::filesystem::path user_socket_dir();

// The check alone, for a directory that exists or is created here with mode 0700: a
// directory owned by the effective uid with no permission bits for group or others.
// Throws Error (kFailure).
void ensure_private_dir(const std::filesystem::path& dir);

}  // namespace cuslice::cli
