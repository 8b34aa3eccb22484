// What the fake MPS control daemon (control_daemon.h) and the fake libcuda's MPS client
// (cuda/mps_client.h) share: where the daemon's files lie in its pipe directory, and the
// line-based exchange on its Unix socket. It owns no state and never looks at the environment.
//
// Every exchange is one connection: the peer writes one line, the daemon answers with lines and,
// except for a client's hello, closes. A hello's connection stays open for the client's life, so
// the daemon sees it leave.
//
//   hello pid=<pid> percentage=<1..100> priority=<0|1> pinned=<spec|none>
//       -> "ok generation=<g> server=<pid>"     (connection kept)
//   fault pid=<pid> kernel=<name>
//       -> "ok generation=<g>"                  (the server ended; g is the new generation)
//   command <text>                              (what nvidia-cuda-mps-control reads on stdin)
//       -> the answer's lines, then EOF
#pragma once

#include <cstdint>
#include <string>

namespace fake_mps {

// Files of the daemon inside its pipe directory.
inline constexpr char kSocketName[] = "control";
inline constexpr char kLockName[] = "control_lock";
// The serving daemon's pid, as the real daemon writes it (removed when it stops).
inline constexpr char kPidFileName[] = "nvidia-cuda-mps-control.pid";
// 8 bytes, a std::atomic<uint64_t>: the generation of the daemon's current server. Clients map
// it and compare it with the generation they connected under.
inline constexpr char kGenerationName[] = "fake_server_generation";

std::string join_path(const std::string& directory, const char* name);

// A connected socket to <directory>/control, or -1 (errno says why). Reads on it time out after
// timeout_ms, so that a daemon that never answers cannot hang its peer.
int connect_control(const std::string& directory, int timeout_ms);

// Writes all of text (false on error; SIGPIPE is not raised).
bool send_text(int fd, const std::string& text);

// Reads one line (without its '\n') into *line; false on EOF, error or timeout before a '\n'.
// Reads byte by byte: the lines are short, and nothing past the line is consumed.
bool read_line(int fd, std::string* line);

// The value of `key=` in a line of words, or empty.
std::string word_value(const std::string& line, const std::string& key);

}  // namespace fake_mps
