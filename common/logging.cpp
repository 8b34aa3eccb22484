#include "common/logging.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/sinks/systemd_sink.h>
#include <spdlog/spdlog.h>

#include <memory>

namespace cuslice {

void configure_logging(LogTarget target, spdlog::level::level_enum level) {
  std::shared_ptr<spdlog::logger> logger;
  if (target == LogTarget::kJournald) {
    // The journal adds time, host and unit itself; the identifier names us in it.
    logger = std::make_shared<spdlog::logger>(
        "cuslice-scheduler", std::make_shared<spdlog::sinks::systemd_sink_mt>("cuslice-scheduler"));
  } else {
    // Uncoloured: stderr is usually a file or the journal, not a terminal.
    logger = std::make_shared<spdlog::logger>("cuslice-scheduler", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %l: %v");
  }
  logger->set_level(level);
  // Warnings and errors reach the journal or file at once, even if the daemon is killed.
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace cuslice
