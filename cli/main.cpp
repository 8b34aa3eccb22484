// cuslice: the user-facing tool. Parses the command line, runs the chosen subcommand (see
// commands.h) and turns every failure into one message on stderr and an exit status from
// protocol/exit_codes.h.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "cli/error.h"
#include "cli/version.h"
#include "protocol/exit_codes.h"

namespace {

using cuslice::ExitCode;
using cuslice::to_int;

// The footer of --help: protocol/exit_codes.h's table, as docs/reference/cli.md shows it.
std::string exit_status_help() {
  std::string text = "Exit status:\n";
  for (const cuslice::ExitCodeDoc& doc : cuslice::kExitCodeDocs)
    text += fmt::format("  {:<4} {}\n", to_int(doc.code), doc.meaning);
  text +=
      "Once `cuslice run` has started its command it has become that command: the status is\n"
      "the command's own, and a shell reports 128+N when signal N ended it.";
  return text;
}

// "cuslice cdi generate": the subcommands parsed so far, for messages.
std::string command_path(const CLI::App& root) {
  std::string path = root.get_name();
  const CLI::App* current = &root;
  for (;;) {
    const std::vector<CLI::App*> parsed = current->get_subcommands();
    if (parsed.empty()) return path;
    current = parsed.front();
    path += " " + current->get_name();
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Share one NVIDIA GPU between tenants: memory quotas and compute shares.",
               "cuslice"};
  app.require_subcommand(1);
  app.set_version_flag("--version", cuslice::cli::version_text());
  app.footer(exit_status_help());

  cuslice::cli::Action chosen;
  for (cuslice::cli::AddCommand add : cuslice::cli::kCommands) add(app, chosen);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help or --version: printed on stdout, status 0
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string command = command_path(app);
    cuslice::cli::print_error(command, e.what(), "see '" + command + " --help'");
    return to_int(ExitCode::kUsage);
  }

  try {
    return chosen();
  } catch (const cuslice::cli::Error& e) {
    cuslice::cli::print_error(command_path(app), e.what(), e.hint());
    return to_int(e.code());
  } catch (const std::exception& e) {
    // A library failure nobody anticipated (allocation, a filesystem call): still one line on
    // stderr and a documented status, never std::terminate's abort.
    cuslice::cli::print_error(command_path(app), std::string("internal error: ") + e.what(),
                              "please report this with the command line that caused it");
    return to_int(ExitCode::kFailure);
  }
}
