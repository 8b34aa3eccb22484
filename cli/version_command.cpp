#include <CLI/CLI.hpp>
#include <cstdio>

#include "commands.h"
#include "exit_code.h"
#include "version.h"

namespace cuslice::cli {

void add_version_command(CLI::App& root, Action& chosen) {
  CLI::App* version = root.add_subcommand("version", "Print cuslice's version and exit");
  version->callback([&chosen] {
    chosen = [] {
      std::printf("cuslice %s\n", kVersion);
      return to_int(ExitCode::kOk);
    };
  });
}

}  // namespace cuslice::cli
