#include "scheduler_autostart.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include "error.h"
#include "hook_locator.h"
#include "shm_protocol.h"

namespace cuslice::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kStartTimeout = 10s;  // the daemon answers in milliseconds; this is for loaded CI
constexpr auto kLockTimeout = 15s;   // longer than one start, so a waiter sees the first one's result
constexpr auto kPoll = 20ms;

bool auto_start_enabled() {
  const char* value = std::getenv(kAutoStartEnv);
  return value == nullptr || std::strcmp(value, "0") != 0;
}

// Held for the duration of one start; released (and closed) on destruction.
class StartLock {
 public:
  explicit StartLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      throw Error(ExitCode::kFailure, fmt::format("cannot open {}: {}", path, std::strerror(errno)),
                  "pass --socket in a directory you can write, e.g. $XDG_RUNTIME_DIR/cuslice.sock");
    const auto deadline = Clock::now() + kLockTimeout;
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK || Clock::now() > deadline) {
        ::close(fd_);
        throw Error(ExitCode::kFailure, fmt::format("cannot lock {}: another cuslice is stuck starting the scheduler",
                                                    path));
      }
      std::this_thread::sleep_for(kPoll);
    }
  }
  ~StartLock() { ::close(fd_); }
  StartLock(const StartLock&) = delete;
  StartLock& operator=(const StartLock&) = delete;

 private:
  int fd_ = -1;
};

// The last lines of the daemon's log, to say why it did not start.
std::string log_tail(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string tail;
  for (size_t i = lines.size() > 3 ? lines.size() - 3 : 0; i < lines.size(); ++i) tail += "\n  " + lines[i];
  return tail;
}

// In the grandchild: becomes the daemon. Never returns.
[[noreturn]] void exec_daemon(const fs::path& program, const std::string& socket_path, const std::string& log_path) {
  const int null_fd = ::open("/dev/null", O_RDWR);
  int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (log_fd < 0) log_fd = null_fd;
  ::dup2(null_fd, STDIN_FILENO);
  ::dup2(null_fd, STDOUT_FILENO);
  ::dup2(log_fd, STDERR_FILENO);
  // Nothing of ours (nor of whoever started us: a test harness's pipes) stays open in a
  // process that may outlive us.
  ::close_range(3, ~0u, 0);
  // The daemon is not the command: no hook in it, and no talking to a service manager
  // that started `cuslice run` as its main process.
  for (const char* name : {"LD_PRELOAD", "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID"})
    ::unsetenv(name);
  const std::string grace = fmt::format("{:g}", kIdleGraceSeconds);
  const std::string shm_name = shm_name_for_socket(socket_path);
  ::execl(program.c_str(), program.c_str(), "--ephemeral", "--exit-when-idle", grace.c_str(), "--socket",
          socket_path.c_str(), "--shm-name", shm_name.c_str(), "--log-level", "info", static_cast<char*>(nullptr));
  ::_exit(127);
}

bool answering(const std::string& socket_path) { return SchedulerConnection::connect(socket_path).has_value(); }

// Starts the daemon detached and waits until it answers. A middle process watches it, so
// that we learn of a daemon that exits at once (bad socket directory) without making it
// our own child: `run` becomes the user's command next, which must not inherit it.
void start_daemon(const fs::path& program, const std::string& socket_path) {
  const std::string log_path = socket_path + ".log";
  const pid_t watcher = ::fork();
  if (watcher < 0) throw Error(ExitCode::kFailure, fmt::format("fork: {}", std::strerror(errno)));
  if (watcher == 0) {
    ::setsid();  // no terminal: ^C in the user's shell does not reach the daemon
    const pid_t daemon = ::fork();
    if (daemon < 0) ::_exit(1);
    if (daemon == 0) exec_daemon(program, socket_path, log_path);
    const auto deadline = Clock::now() + kStartTimeout;
    while (Clock::now() < deadline) {
      if (::waitpid(daemon, nullptr, WNOHANG) == daemon) ::_exit(1);
      try {
        if (answering(socket_path)) ::_exit(0);
      } catch (...) {
        ::_exit(1);
      }
      std::this_thread::sleep_for(kPoll);
    }
    ::_exit(2);
  }
  int status = 0;
  while (::waitpid(watcher, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  const bool timed_out = WIFEXITED(status) && WEXITSTATUS(status) == 2;
  throw Error(ExitCode::kFailure,
              fmt::format("could not start {} on {}: {}{}", program.string(), socket_path,
                          timed_out ? "it did not answer within 10 s" : "it exited", log_tail(log_path)),
              fmt::format("its log is {}; set {}=0 to run without a scheduler", log_path, kAutoStartEnv));
}

}  // namespace

std::string shm_name_for_socket(const std::string& socket_path) {
  if (socket_path == wire::kDefaultSocketPath) return shm::kDefaultName;
  // FNV-1a: stable across runs and versions, which std::hash does not promise.
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const unsigned char c : socket_path) hash = (hash ^ c) * 0x100000001b3ull;
  return fmt::format("{}-{:016x}", shm::kDefaultName, hash);
}

fs::path locate_scheduler() {
  if (const char* env = std::getenv(kSchedulerPathEnv); env != nullptr && env[0] != '\0') {
    if (::access(env, X_OK) != 0)
      throw Error(ExitCode::kFailure, fmt::format("{}={} is not an executable file", kSchedulerPathEnv, env));
    return fs::absolute(env);
  }
  const fs::path bin_dir = current_executable().parent_path();
  for (const fs::path& candidate : {bin_dir / "cuslice-scheduler", bin_dir / ".." / "scheduler" / "cuslice-scheduler"})
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.lexically_normal();
  throw Error(ExitCode::kFailure,
              fmt::format("no scheduler answers and cuslice-scheduler is not beside {}", bin_dir.string()),
              fmt::format("start one, set {} to its path, or set {}=0 to run without a scheduler",
                          kSchedulerPathEnv, kAutoStartEnv));
}

std::optional<SchedulerConnection> connect_or_start_scheduler(const std::string& socket_path) {
  if (auto connection = SchedulerConnection::connect(socket_path)) return connection;
  if (!auto_start_enabled()) return std::nullopt;
  const fs::path program = locate_scheduler();
  std::error_code ec;
  const fs::path dir = fs::path(socket_path).parent_path();
  if (!dir.empty()) fs::create_directories(dir, ec);
  if (ec)
    throw Error(ExitCode::kFailure, fmt::format("cannot create {}: {}", dir.string(), ec.message()),
                "pass --socket in a directory you can write, e.g. $XDG_RUNTIME_DIR/cuslice.sock");
  {
    const StartLock lock(socket_path + ".lock");
    // Someone may have started it while we waited for the lock.
    if (!answering(socket_path)) start_daemon(program, socket_path);
  }
  if (auto connection = SchedulerConnection::connect(socket_path)) return connection;
  throw Error(ExitCode::kFailure, fmt::format("the scheduler started on {} but stopped answering", socket_path));
}

}  // namespace cuslice::cli
