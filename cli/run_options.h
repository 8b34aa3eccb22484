// What `cuslice run`'s flags hold once parsed (run_command.cpp), read by the steps of a run
// (scheduler_join.h). Values are already checked, and some normalised (run_flags.h).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace cuslice::cli {

struct RunOptions {
  std::optional<std::string> memory;
  std::optional<std::string> tenant;
  std::optional<std::string> share;  // normalised to "<number>%"
  std::optional<std::string> limit;  // normalised to "<number>%"
  std::optional<std::string> priority;
  std::optional<std::string> gpus;
  std::optional<std::string> log_level;
  std::optional<std::filesystem::path> hook;
  std::optional<std::string> socket;
  std::optional<std::string> control_socket;
  std::vector<std::string> command;
};

}  // namespace cuslice::cli
