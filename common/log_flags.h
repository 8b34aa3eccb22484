// The --log-level and --log-target flags every cuslice daemon takes (cuslice-scheduler and the
// node agents), in one place so that they accept the same words. Only declares the flags:
// what the words do is common/logging.h's configure_logging().
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace cuslice {

// Adds --log-level into `level` and --log-target into `target` (stderr or journald); the
// target's help is `target_help`, which may say more of what each target keeps.
inline void add_log_flags(CLI::App& app, std::string& level, std::string& target, const std::string& target_help) {
  app.add_option("--log-level", level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_option("--log-target", target, target_help)
      ->check(CLI::IsMember({"stderr", "journald"}))
      ->capture_default_str();
}

}  // namespace cuslice
