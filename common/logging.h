// Where cuslice-scheduler's log goes: stderr (default; under systemd that is the journal
// too, as plain text) or journald directly through libsystemd, which keeps each message's
// level as its syslog priority, so `journalctl -p warning -u cuslice-scheduler` works.
#pragma once

#include <spdlog/common.h>

#include <string>

namespace cuslice {

enum class LogTarget { kStderr, kJournald };

// Makes spdlog's default logger write to `target` from `level` up. Call once, first.
void configure_logging(LogTarget target, spdlog::level::level_enum level);

}  // namespace cuslice
