// `cuslice config check FILE`: validates a scheduler configuration the way the daemon
// will read it. Valid: one summary line on stdout, exit 0. Invalid: every error on stderr
// as file:line:column: message (the format compilers use, so editors jump to it), exit 3.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/error.h"
#include "config/tenant_config.h"

namespace cuslice::cli {
namespace {

std::string summary(const std::string& file, const Config& config) {
  std::string names;
  for (const TenantConfig& t : config.tenants) names += (names.empty() ? "" : ", ") + t.name;
  std::string line = fmt::format("{}: valid: {} tenant{} ({}), quantum {:g}ms", file, config.tenants.size(),
                                 config.tenants.size() == 1 ? "" : "s", names,
                                 std::chrono::duration<double, std::milli>(config.scheduler.quantum).count());
  if (config.scheduler.default_tenant) line += ", default tenant " + *config.scheduler.default_tenant;
  if (config.scheduler.metrics_port) line += fmt::format(", metrics on port {}", *config.scheduler.metrics_port);
  return line;
}

int check(const std::string& file) {
  const ConfigResult result = load_config_file(file);
  if (!result.ok()) {
    for (const ConfigError& e : result.errors) std::fprintf(stderr, "%s\n", e.to_string().c_str());
    return to_int(ExitCode::kConfigInvalid);
  }
  std::printf("%s\n", summary(file, result.config).c_str());
  return to_int(ExitCode::kOk);
}

}  // namespace

void add_config_command(CLI::App& root, Action& chosen) {
  CLI::App* group = root.add_subcommand("config", "Work with scheduler configuration files");
  group->require_subcommand(1);
  auto file = std::make_shared<std::string>();
  CLI::App* cmd = group->add_subcommand("check", "Check a configuration file as cuslice-scheduler would read it");
  cmd->add_option("FILE", *file, "The YAML file")->required();
  cmd->callback([file, &chosen] { chosen = [file] { return check(*file); }; });
}

}  // namespace cuslice::cli
