// nvidia-cuda-mps-control, as the fake driver's tests need it: -f runs the control daemon in the
// foreground, -d daemonises it (returning once its socket listens), and without options the
// commands read on stdin are sent to the running daemon and its answers printed. The daemon
// itself is control_daemon.h; this file owns only the command line and the command mode.
//
// CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps) and CUDA_MPS_LOG_DIRECTORY (default
// /var/log/nvidia-mps) say where, as for the real one.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "tests/fake_driver/mps/control_daemon.h"
#include "tests/fake_driver/mps/mps_wire.h"

namespace {

constexpr int kAnswerTimeoutMs = 10'000;

std::string environment(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

int usage(std::FILE* to, int status) {
  std::fprintf(to,
               "usage: nvidia-cuda-mps-control [-d | -f]\n"
               "  -d  start the control daemon in the background\n"
               "  -f  run the control daemon in the foreground\n"
               "  (no option) send the commands read on stdin to the daemon: quit, get_server_list,\n"
               "              get_client_list <server pid>\n");
  return status;
}

// One command, one connection: the daemon's answer is everything it writes before closing.
bool send_command(const std::string& directory, const std::string& text) {
  const int fd = fake_mps::connect_control(directory, kAnswerTimeoutMs);
  if (fd < 0) {
    std::fprintf(stderr, "Cannot find MPS control daemon process (%s: %s)\n",
                 fake_mps::join_path(directory, fake_mps::kSocketName).c_str(), std::strerror(errno));
    return false;
  }
  if (!fake_mps::send_text(fd, "command " + text + "\n")) {
    close(fd);
    return false;
  }
  char buffer[4096];
  for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) std::fwrite(buffer, 1, static_cast<std::size_t>(n), stdout);
  std::fflush(stdout);
  close(fd);
  return true;
}

int command_mode(const std::string& directory) {
  for (std::string line; std::getline(std::cin, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    const std::size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos) continue;
    line.erase(0, start);
    if (!send_command(directory, line)) return 1;
    if (line == "quit" || line.rfind("quit ", 0) == 0) break;
  }
  return 0;
}

// Writes the pid file, then listens: whoever can connect can read the daemon's pid.
bool get_ready(fake_mps::ControlDaemon& daemon, pid_t server, const std::string& pipe_directory) {
  std::string error;
  if (!daemon.write_pid_file(server)) error = "cannot write its pid file in " + pipe_directory;
  if (error.empty() && daemon.listen_now(&error)) return true;
  std::fprintf(stderr, "nvidia-cuda-mps-control: %s\n", error.c_str());
  return false;
}

// The parent returns once the child's socket listens (the socket is theirs alike), and the
// child serves only after that.
int daemonise(fake_mps::ControlDaemon& daemon, const std::string& pipe_directory) {
  int ready[2];
  if (pipe(ready) != 0) return 1;
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("nvidia-cuda-mps-control: fork");
    return 1;
  }
  if (pid > 0) {
    const bool ok = get_ready(daemon, pid, pipe_directory);
    if (!ok) kill(pid, SIGKILL);
    char byte = 1;
    if (ok && write(ready[1], &byte, 1) != 1) return 1;
    _exit(ok ? 0 : 1);  // leaves the files to the child
  }
  close(ready[1]);
  char byte = 0;
  if (read(ready[0], &byte, 1) != 1) _exit(1);  // the parent failed
  close(ready[0]);
  setsid();
  const int null = open("/dev/null", O_RDWR);
  if (null >= 0) {
    for (int fd = 0; fd <= 2; ++fd) dup2(null, fd);
    if (null > 2) close(null);
  }
  return daemon.run();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2) return usage(stderr, 1);
  const std::string option = argc == 2 ? argv[1] : "";
  if (option == "-h" || option == "--help") return usage(stdout, 0);
  if (!option.empty() && option != "-f" && option != "-d") return usage(stderr, 1);
  const std::string pipe_directory = environment("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps");
  if (option.empty()) return command_mode(pipe_directory);
  fake_mps::ControlDaemon daemon(pipe_directory, environment("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps"));
  std::string error;
  if (!daemon.claim(&error)) {
    std::fprintf(stderr, "nvidia-cuda-mps-control: %s\n", error.c_str());
    return 1;
  }
  if (option == "-d") return daemonise(daemon, pipe_directory);
  return get_ready(daemon, getpid(), pipe_directory) ? daemon.run() : 1;
}
