// MpsControl (mps_control.h).
#include "scheduler/spatial/mps_control.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "protocol/clock.h"
#include "scheduler/os/process_handle.h"

extern char** environ;

namespace cuslice {
namespace {

constexpr const char* kDefaultProgram = "nvidia-cuda-mps-control";
// A Unix socket's path holds 107 characters; the control daemon's is `<pipe>/control`.
constexpr size_t kMaxPipeDirectory = 107 - sizeof("/control") + 1;
constexpr auto kMaxBackoff = std::chrono::seconds(30);

std::string beside(const std::string& socket_path, const char* name) {
  const size_t slash = socket_path.rfind('/');
  return (slash == std::string::npos ? std::string(".") : socket_path.substr(0, slash)) + "/" + name;
}

// mkdir -p with `mode` on the last component; true when it is a directory afterwards.
bool make_directory(const std::string& path, mode_t mode) {
  for (size_t at = path.find('/', 1); at != std::string::npos; at = path.find('/', at + 1))
    mkdir(path.substr(0, at).c_str(), 0755);
  if (mkdir(path.c_str(), mode) != 0 && errno != EEXIST) return false;
  struct stat st{};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && chmod(path.c_str(), mode) == 0;
}

// The environment the control daemon (and the servers it starts) runs with.
std::vector<std::string> control_environment(const SpatialSettings& s, const std::string& pipe, const std::string& log) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view v(*e);
    if (v.starts_with("CUDA_MPS_") || v.starts_with("CUDA_VISIBLE_DEVICES=") || v.starts_with("CUDA_DEVICE_ORDER="))
      continue;
    env.emplace_back(v);
  }
  env.push_back("CUDA_MPS_PIPE_DIRECTORY=" + pipe);
  env.push_back("CUDA_MPS_LOG_DIRECTORY=" + log);
  if (!s.all_gpus) {
    // The scheduler numbers GPUs as NVML does, by PCI bus: so must the servers.
    std::string list;
    for (uint32_t g = 0; g < kMaxConfigGpus; ++g)
      if (s.on_gpu(g)) list += (list.empty() ? "" : ",") + std::to_string(g);
    env.push_back("CUDA_DEVICE_ORDER=PCI_BUS_ID");
    env.push_back("CUDA_VISIBLE_DEVICES=" + list);
  }
  return env;
}

// posix_spawnp of argv with env; stdin from `stdin_fd` when >= 0. The daemon blocks its
// signals for its signalfd: the child must not inherit that mask.
pid_t spawn_process(const std::vector<std::string>& argv, const std::vector<std::string>& env, int stdin_fd) {
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (stdin_fd >= 0) posix_spawn_file_actions_adddup2(&actions, stdin_fd, 0);
  else posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &actions, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    errno = rc;
    return -1;
  }
  return pid;
}

// Whether a control daemon answers on `<pipe>/control` (a connect succeeds).
bool control_answers(const std::string& pipe) {
  const std::string path = pipe + "/control";
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return false;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool ok = s >= 0 && connect(s, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  if (s >= 0) close(s);
  return ok;
}

// Waits at most `timeout` for the pidfd's process to exit.
bool wait_exit(int pidfd, std::chrono::milliseconds timeout) {
  pollfd p{pidfd, POLLIN, 0};
  return poll(&p, 1, static_cast<int>(timeout.count())) > 0;
}

}  // namespace

MpsControl::MpsControl(SharedSegment& segment, const SpatialSettings& settings, const std::string& socket_path)
    : segment_(segment),
      settings_(settings),
      program_(settings.mps_control.empty() ? kDefaultProgram : settings.mps_control),
      pipe_dir_(settings.pipe_directory.empty() ? beside(socket_path, "mps") : settings.pipe_directory),
      log_dir_(settings.log_directory.empty() ? beside(socket_path, "mps-log") : settings.log_directory) {}

MpsControl::~MpsControl() { stop(); }

pid_t MpsControl::pid() const {
  if (pid_ > 0) return pid_;
  if (!adopted_) return 0;
  FILE* f = std::fopen((pipe_dir_ + "/nvidia-cuda-mps-control.pid").c_str(), "r");
  int value = 0;
  if (f != nullptr) {
    if (std::fscanf(f, "%d", &value) != 1) value = 0;
    std::fclose(f);
  }
  return value > 0 ? value : 0;
}

void MpsControl::publish(uint32_t state) { segment_->spatial.mps_state.store(state, std::memory_order_release); }

void MpsControl::start() {
  if (!settings_.any()) return;
  shm::SpatialState& sp = segment_->spatial;
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g)
    if (settings_.on_gpu(g)) sp.spatial_gpus.fetch_or(1u << g, std::memory_order_relaxed);
  if (pipe_dir_.size() > kMaxPipeDirectory) {
    spdlog::error("spatial GPUs: the MPS pipe directory {} is longer than {} characters; tenants time-slice",
                  pipe_dir_, kMaxPipeDirectory);
    publish(shm::SpatialState::kMpsFailed);
    return;
  }
  std::strncpy(sp.mps_pipe_directory, pipe_dir_.c_str(), sizeof sp.mps_pipe_directory - 1);
  if (control_answers(pipe_dir_)) {
    // Left by a scheduler that died: its servers still serve running tenants. Kept; watched
    // by whether it answers.
    adopted_ = true;
    publish(shm::SpatialState::kMpsRunning);
    spdlog::info("spatial GPUs: an MPS control daemon already serves {}: kept", pipe_dir_);
    return;
  }
  if (!spawn()) restart_at_ = Nanos{now_ns()} + backoff_;
}

bool MpsControl::spawn() {
  // The pipe directory is where every spatial tenant's process connects; the log is ours.
  if (!make_directory(pipe_dir_, 0755) || !make_directory(log_dir_, 0700)) {
    spdlog::error("spatial GPUs: cannot create {} or {}: {}; tenants time-slice", pipe_dir_, log_dir_, std::strerror(errno));
    publish(shm::SpatialState::kMpsFailed);
    return false;
  }
  publish(shm::SpatialState::kMpsStarting);
  const pid_t pid = spawn_process({program_, "-f"}, control_environment(settings_, pipe_dir_, log_dir_), -1);
  if (pid < 0) {
    spdlog::error("spatial GPUs: cannot start {}: {}; tenants time-slice until it starts", program_, std::strerror(errno));
    publish(shm::SpatialState::kMpsFailed);
    return false;
  }
  pid_ = pid;
  pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  started_at_ = Nanos{now_ns()};
  segment_->spatial.mps_starts.fetch_add(1, std::memory_order_relaxed);
  // Clients that connect before its socket exists fail their cuInit: wait for it, briefly.
  const std::string control = pipe_dir_ + "/control";
  for (int i = 0; i < 100 && access(control.c_str(), F_OK) != 0 && pidfd_alive(pidfd_); ++i) usleep(20'000);
  if (access(control.c_str(), F_OK) != 0) {
    spdlog::error("spatial GPUs: {} (pid {}) made no {} within 2 s; tenants time-slice until it does", program_, pid,
                  control);
    publish(shm::SpatialState::kMpsFailed);
    return true;  // its exit, or the next tick, decides
  }
  publish(shm::SpatialState::kMpsRunning);
  spdlog::info("spatial GPUs: MPS control daemon {} (pid {}) serves {}", program_, pid, pipe_dir_);
  return true;
}

void MpsControl::on_exit() {
  if (pid_ <= 0) return;
  int status = 0;
  waitpid(pid_, &status, WNOHANG);
  spdlog::warn("spatial GPUs: the MPS control daemon (pid {}) ended ({} {}); starting it again", pid_,
               WIFSIGNALED(status) ? "signal" : "status", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  close(pidfd_);
  pidfd_ = -1;
  pid_ = -1;
  publish(shm::SpatialState::kMpsStarting);
  const Nanos now{now_ns()};
  // One that ran a while gets started again at once; one that keeps failing, less often.
  backoff_ = now - started_at_ > std::chrono::seconds(60) ? Nanos(std::chrono::milliseconds(500))
                                                           : std::min<Nanos>(backoff_ * 2, kMaxBackoff);
  restart_at_ = now + backoff_;
}

void MpsControl::tick(Nanos now) {
  if (adopted_ && !control_answers(pipe_dir_)) {
    adopted_ = false;
    spdlog::warn("spatial GPUs: the MPS control daemon kept from before ended; starting one");
    publish(shm::SpatialState::kMpsStarting);
    restart_at_ = now;
  }
  if (!settings_.any() || restart_at_ == Nanos{0} || now < restart_at_) return;
  if (pid_ > 0) {
    // Started, but its socket came late: running once it is there.
    if (access((pipe_dir_ + "/control").c_str(), F_OK) == 0) publish(shm::SpatialState::kMpsRunning);
    restart_at_ = Nanos{0};
    return;
  }
  restart_at_ = Nanos{0};
  if (!spawn()) restart_at_ = now + backoff_;
}

bool MpsControl::send_quit(Nanos timeout) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return false;
  const pid_t quitter = spawn_process({program_}, control_environment(settings_, pipe_dir_, log_dir_), fds[0]);
  close(fds[0]);
  if (quitter > 0 && write(fds[1], "quit\n", 5) != 5) spdlog::debug("spatial GPUs: could not send quit");
  close(fds[1]);
  if (quitter <= 0) return false;
  const int qfd = static_cast<int>(syscall(SYS_pidfd_open, quitter, 0));
  const bool answered = qfd >= 0 && wait_exit(qfd, std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
  if (!answered) kill(quitter, SIGKILL);
  waitpid(quitter, nullptr, 0);
  if (qfd >= 0) close(qfd);
  return answered;
}

void MpsControl::stop() {
  if (adopted_) {
    send_quit(std::chrono::seconds(5));
    adopted_ = false;
    publish(shm::SpatialState::kMpsOff);
  }
  if (pid_ <= 0) return;
  // `quit` ends the servers too; a control daemon that does not answer is signalled.
  send_quit(std::chrono::seconds(5));
  if (!wait_exit(pidfd_, std::chrono::seconds(5))) {
    kill(pid_, SIGTERM);
    if (!wait_exit(pidfd_, std::chrono::seconds(2))) kill(pid_, SIGKILL);
  }
  waitpid(pid_, nullptr, 0);
  close(pidfd_);
  pidfd_ = -1;
  pid_ = -1;
  publish(shm::SpatialState::kMpsOff);
  spdlog::info("spatial GPUs: MPS control daemon stopped");
}

}  // namespace cuslice
