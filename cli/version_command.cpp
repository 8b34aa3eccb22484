// `cuslice version`: what this cuslice is and which protocols it speaks, so that a mismatch
// with the running cuslice-scheduler (`cuslice-scheduler --version`) shows at a glance.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "cli/version.h"
#include "protocol/exit_codes.h"
#include "protocol/shm_protocol.h"
#include "protocol/socket_protocol.h"

namespace cuslice::cli {

std::string version_text() {
  return fmt::format(
      "cuslice {}\n"
      "shared segment ABI {}.{}\n"
      "socket protocol: registration {}, control {}",
      kVersion, shm::kAbiMajor, shm::kAbiMinor, wire::kVersion, wire::kControlVersion);
}

void add_version_command(CLI::App& root, Action& chosen) {
  CLI::App* version =
      root.add_subcommand("version", "Print cuslice's version and the protocol versions it speaks");
  version->callback([&chosen] {
    chosen = [] {
      std::printf("%s\n", version_text().c_str());
      return to_int(ExitCode::kOk);
    };
  });
}

}  // namespace cuslice::cli
