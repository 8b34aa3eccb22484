// `cuslice cdi generate`: prints (or writes) the CDI spec of cdi_spec.h for this node.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "cli/atomic_write.h"
#include "cli/cdi_spec.h"
#include "cli/commands.h"
#include "cli/error.h"
#include "cli/flag_wiring.h"
#include "cli/hook_locator.h"
#include "protocol/socket_protocol.h"

namespace cuslice::cli {
namespace {

struct GenerateOptions {
  std::optional<std::filesystem::path> output;
  std::optional<std::filesystem::path> hook_path;
  std::string socket_dir = std::filesystem::path(wire::kDefaultSocketPath).parent_path();
  std::string shm_name = shm::kDefaultName;
  std::string device_name = kCdiDefaultDeviceName;
};

// Container runtimes resolve a hostPath on the host, not against the directory cuslice was
// run from, so relative paths are refused rather than silently completed.
std::string check_absolute(std::string& path) {
  if (path.empty() || path.front() != '/') return "\"" + path + "\" is not an absolute path";
  return {};
}

std::string check_device_name(std::string& name) { return cdi_device_name_problem(name); }
std::string check_shm_name(std::string& name) { return shm_name_problem(name); }

int generate(const GenerateOptions& options) {
  CdiSpecInput input;
  // The hook must exist where the spec says it is, or every container asking for the device
  // fails to start; finding out now is kinder.
  input.hook_host_path =
      locate_hook(hook_search_from_environment(options.hook_path, "--hook-path"));
  input.socket_host_dir = std::filesystem::path(options.socket_dir).lexically_normal();
  // "/run/cuslice/" normalises to itself; the spec names the directory without the slash.
  if (!input.socket_host_dir.has_filename() && input.socket_host_dir.has_relative_path())
    input.socket_host_dir = input.socket_host_dir.parent_path();
  input.shm_name = options.shm_name;
  input.device_name = options.device_name;

  const std::string text = make_cdi_spec(input).dump(2) + "\n";
  if (options.output) {
    write_file_atomically(*options.output, text);
  } else if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() ||
             std::fflush(stdout) != 0) {
    throw Error(ExitCode::kFailure, "cannot write the spec to standard output");
  }
  return to_int(ExitCode::kOk);
}

}  // namespace

void add_cdi_command(CLI::App& root, Action& chosen) {
  CLI::App* cdi = root.add_subcommand("cdi", "Container Device Interface (CDI) support");
  cdi->require_subcommand(1);

  auto options = std::make_shared<GenerateOptions>();
  CLI::App* generate_cmd =
      cdi->add_subcommand("generate", "Print a CDI spec that makes containers cuslice tenants");
  generate_cmd->footer([] {
    return "Install the spec where the container runtime looks for CDI specs, then request the\n"
           "device next to NVIDIA's GPU device:\n"
           "  cuslice cdi generate --output /etc/cdi/cuslice.json\n"
           "  podman run --device nvidia.com/gpu=all --device cuslice.io/gpu=all IMAGE\n"
           "CDI sets LD_PRELOAD instead of appending to it; for images that preload libraries of\n"
           "their own, use the entrypoint wrapper cuslice-entrypoint.sh instead.\n";
  });
  generate_cmd
      ->add_option("--output,-o", options->output,
                   "Write the spec to FILE (replaced atomically) instead of stdout")
      ->type_name("FILE");
  generate_cmd
      ->add_option("--hook-path", options->hook_path,
                   "libcuslice.so on the host (default: $CUSLICE_HOOK_PATH, then ../lib and "
                   "../hook beside this program)")
      ->type_name("PATH");
  add_checked_flag(*generate_cmd, "--socket-dir", options->socket_dir, "DIR",
                   "Directory of the scheduler's socket on the host", check_absolute)
      ->capture_default_str();
  add_checked_flag(*generate_cmd, "--shm-name", options->shm_name, "NAME",
                   "The scheduler's shared-memory segment (its --shm-name)", check_shm_name)
      ->capture_default_str();
  add_checked_flag(*generate_cmd, "--device-name", options->device_name, "NAME",
                   "Name of the CDI device: containers request cuslice.io/gpu=NAME", check_device_name)
      ->capture_default_str();

  generate_cmd->callback([options, &chosen] { chosen = [options] { return generate(*options); }; });
}

}  // namespace cuslice::cli
