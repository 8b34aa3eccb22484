#include "cli/scheduler_autostart.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>
#include <vector>

#include "cli/error.h"
#include "cli/hook_locator.h"
#include "cli/runtime_dir.h"
#include "node/random_hex.h"
#include "protocol/exit_codes.h"
#include "protocol/shm_protocol.h"

namespace cuslice::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kStartTimeout = 10s;  // the daemon answers in milliseconds; this is for loaded CI
constexpr auto kLockTimeout = 15s;   // longer than one start, so a waiter sees the first one's result
constexpr auto kPoll = 20ms;
constexpr size_t kLogLines = 5;

// Held for the duration of one start; released (and closed) on destruction.
class StartLock {
 public:
  explicit StartLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ < 0)
      throw Error(ExitCode::kFailure, fmt::format("cannot open {}: {}", path, std::strerror(errno)),
                  "pass --socket PATH in a directory you can write");
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

// The scheduler's log, opened by us rather than by the daemon, so that a log we cannot
// write is reported as such, and so that only what this start wrote is shown.
class DaemonLog {
 public:
  explicit DaemonLog(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd_ < 0)
      throw Error(ExitCode::kFailure,
                  fmt::format("cannot write the scheduler's log {}: {}", path_, std::strerror(errno)),
                  "pass --socket PATH in a directory you own, or remove the old log");
    const off_t end = ::lseek(fd_, 0, SEEK_END);
    start_ = end > 0 ? end : 0;
  }
  ~DaemonLog() { ::close(fd_); }
  DaemonLog(const DaemonLog&) = delete;
  DaemonLog& operator=(const DaemonLog&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

  // The last lines written since this object opened the log, indented; empty if none.
  std::string tail() const {
    std::ifstream in(path_);
    in.seekg(start_);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    std::string text;
    for (size_t i = lines.size() > kLogLines ? lines.size() - kLogLines : 0; i < lines.size(); ++i)
      text += "\n  " + lines[i];
    return text;
  }

 private:
  std::string path_;
  int fd_ = -1;
  off_t start_ = 0;
};

// Closes every descriptor from `first` up. close_range where the kernel has it (5.9 and
// later); on older kernels (Ubuntu 20.04's 5.4, RHEL 8's 4.18) it fails with ENOSYS, and
// the descriptors /proc/self/fd lists are closed one by one.
void close_from(int first) {
  if (::close_range(static_cast<unsigned>(first), ~0u, 0) == 0) return;
  std::vector<int> open_fds;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    while (const dirent* e = ::readdir(dir)) {
      const int fd = std::atoi(e->d_name);
      if (fd >= first && fd != ::dirfd(dir)) open_fds.push_back(fd);
    }
    ::closedir(dir);
  }
  for (const int fd : open_fds) ::close(fd);
}

// The segment name for a scheduler started on `socket_path`: shm_name_for_socket's, unless
// another user holds that name in /dev/shm (made first to stop ours: the daemon could not
// replace it); then that name with random digits, which nobody can take beforehand. Hooks
// and `cuslice` learn the name from the daemon.
std::string shm_name_to_start(const std::string& socket_path) {
  const std::string name = shm_name_for_socket(socket_path);
  struct stat st {};
  if (::lstat(("/dev/shm" + name).c_str(), &st) != 0 || st.st_uid == ::geteuid()) return name;
  return name + "-" + node::random_hex(16);
}

// In the grandchild: becomes the daemon. Never returns.
[[noreturn]] void exec_daemon(const fs::path& program, const std::string& socket_path,
                              const std::string& control_path, int log_fd) {
  const int null_fd = ::open("/dev/null", O_RDWR);
  ::dup2(null_fd, STDIN_FILENO);
  ::dup2(null_fd, STDOUT_FILENO);
  ::dup2(log_fd, STDERR_FILENO);
  // Nothing of ours (nor of whoever started us: a test harness's pipes) stays open in a
  // process that may outlive us.
  close_from(3);
  // The daemon is not the command: no hook in it, and no talking to a service manager
  // that started `cuslice run` as its main process.
  for (const char* name : {"LD_PRELOAD", "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID"})
    ::unsetenv(name);
  const std::string grace = fmt::format("{:g}", kIdleGraceSeconds);
  const std::string shm_name = shm_name_to_start(socket_path);
  ::execl(program.c_str(), program.c_str(), "--ephemeral", "--exit-when-idle", grace.c_str(), "--socket",
          socket_path.c_str(), "--control-socket", control_path.c_str(), "--shm-name", shm_name.c_str(),
          "--log-level", "info", static_cast<char*>(nullptr));
  const std::string why = fmt::format("cannot execute {}: {}\n", program.string(), std::strerror(errno));
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, why.data(), why.size());
  ::_exit(to_int(ExitCode::kCannotExecute));
}

bool answering(const std::string& socket_path) { return SchedulerConnection::connect(socket_path).has_value(); }

// What the watcher tells the parent through a pipe.
struct StartReport {
  enum Outcome : int { kAnswers = 0, kExited = 1, kTimedOut = 2, kForkFailed = 3 } outcome = kForkFailed;
  int wait_status = 0;  // with kExited
};

std::string describe_exit(int wait_status) {
  if (WIFEXITED(wait_status)) {
    const int code = WEXITSTATUS(wait_status);
    for (const ExitCodeDoc& doc : kExitCodeDocs)
      if (to_int(doc.code) == code) return fmt::format("it exited with status {} ({})", code, doc.meaning);
    return fmt::format("it exited with status {}", code);
  }
  if (WIFSIGNALED(wait_status)) return fmt::format("it was killed by signal {}", WTERMSIG(wait_status));
  return "it exited";
}

[[noreturn]] void send_report(int fd, const StartReport& report) {
  [[maybe_unused]] const ssize_t n = ::write(fd, &report, sizeof report);
  ::_exit(0);
}

// Whether the daemon answers yet; a failure to connect for another reason than "nobody there"
// counts as not yet.
bool answers_yet(const std::string& socket_path) {
  try {
    return answering(socket_path);
  } catch (...) {
    return false;
  }
}

// In the watcher, the middle process: starts the daemon and writes to `report_fd` whether it
// answered, exited or did not answer in time. Never returns.
[[noreturn]] void watch_daemon(const fs::path& program, const std::string& socket_path,
                               const std::string& control_path, int log_fd, int report_fd) {
  StartReport report;
  ::setsid();  // no terminal: ^C in the user's shell does not reach the daemon
  const pid_t daemon = ::fork();
  if (daemon < 0) send_report(report_fd, report);
  if (daemon == 0) exec_daemon(program, socket_path, control_path, log_fd);
  const auto deadline = Clock::now() + kStartTimeout;
  while (Clock::now() < deadline) {
    if (::waitpid(daemon, &report.wait_status, WNOHANG) == daemon) {
      report.outcome = StartReport::kExited;
      send_report(report_fd, report);
    }
    if (answers_yet(socket_path)) {
      report.outcome = StartReport::kAnswers;
      send_report(report_fd, report);
    }
    std::this_thread::sleep_for(kPoll);
  }
  report.outcome = StartReport::kTimedOut;
  send_report(report_fd, report);
}

// The watcher's report, read from `fd` (then closed) once the watcher has exited; nullopt
// when it sent none whole.
std::optional<StartReport> read_report(int fd, pid_t watcher) {
  StartReport report;
  ssize_t n;
  while ((n = ::read(fd, &report, sizeof report)) < 0 && errno == EINTR) {
  }
  ::close(fd);
  while (::waitpid(watcher, nullptr, 0) < 0 && errno == EINTR) {
  }
  if (n != static_cast<ssize_t>(sizeof report)) return std::nullopt;
  return report;
}

// Why a start failed, as the report says.
std::string failure_of(const std::optional<StartReport>& report) {
  if (report && report->outcome == StartReport::kExited) return describe_exit(report->wait_status);
  if (report && report->outcome == StartReport::kTimedOut)
    return fmt::format("it did not answer within {} s", std::chrono::seconds(kStartTimeout).count());
  return "it could not be started (fork failed)";
}

// Starts the daemon detached and waits until it answers. A middle process watches it, so
// that we learn of a daemon that exits at once (a socket it cannot bind) without making it
// our own child: `run` becomes the user's command next, which must not inherit it.
void start_daemon(const fs::path& program, const std::string& socket_path, const std::string& control_path) {
  const DaemonLog log(socket_path + ".log");
  int report_pipe[2];
  if (::pipe2(report_pipe, O_CLOEXEC) != 0) throw Error(ExitCode::kFailure, fmt::format("pipe: {}", std::strerror(errno)));
  const pid_t watcher = ::fork();
  if (watcher < 0) throw Error(ExitCode::kFailure, fmt::format("fork: {}", std::strerror(errno)));
  if (watcher == 0) {
    ::close(report_pipe[0]);
    watch_daemon(program, socket_path, control_path, log.fd(), report_pipe[1]);
  }
  ::close(report_pipe[1]);
  const std::optional<StartReport> report = read_report(report_pipe[0], watcher);
  if (report && report->outcome == StartReport::kAnswers) return;
  const std::string logged = log.tail();
  throw Error(ExitCode::kFailure,
              fmt::format("could not start {} on {}: {}{}", program.string(), socket_path, failure_of(report),
                          logged.empty() ? std::string(", and logged nothing") : ":" + logged),
              fmt::format("its log is {}; set {}=0 to run without a scheduler", log.path(), kAutoStartEnv));
}

// The directories of the sockets where we are about to start a scheduler.
void prepare_socket_dirs(const SocketChoice& choice, const std::string& socket_path, const std::string& control_path) {
  const fs::path dir = fs::path(socket_path).parent_path();
  if (dir.empty()) return;
  // The user's own directory was created and checked by SocketChoice::ready(); a chosen
  // socket's directory is created as asked, and the node's as root creates it.
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw Error(ExitCode::kFailure,
                fmt::format("no scheduler answers on {}, and one cannot be started there: cannot create {}: {}",
                            choice.describe(), dir.string(), ec.message()),
                choice.chosen ? "pass --socket PATH in a directory you can write"
                              : "run as root, or pass --socket PATH in a directory you can write");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw Error(ExitCode::kFailure,
                fmt::format("no scheduler answers on {}, and one cannot be started there: {} is not writable by you",
                            choice.describe(), dir.string()),
                "pass --socket PATH in a directory you can write");
  // The control socket's, private (the scheduler checks it again); made here so that a
  // directory we cannot make is reported as such rather than in the scheduler's log.
  const fs::path control_dir = fs::path(control_path).parent_path();
  if (control_dir.empty() || fs::exists(fs::symlink_status(control_dir, ec))) return;
  fs::create_directories(control_dir.parent_path(), ec);
  if (!ec && ::mkdir(control_dir.c_str(), 0700) != 0 && errno != EEXIST) ec.assign(errno, std::generic_category());
  if (ec)
    throw Error(ExitCode::kFailure,
                fmt::format("no scheduler answers on {}, and one cannot be started there: cannot create {} for its "
                            "control socket: {}",
                            choice.describe(), control_dir.string(), ec.message()),
                "pass --control-socket PATH in a directory only you can write, or --socket PATH in a directory of "
                "its own");
}

}  // namespace

bool auto_start_enabled() {
  const char* value = std::getenv(kAutoStartEnv);
  return value == nullptr || std::strcmp(value, "0") != 0;
}

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

FoundScheduler connect_or_start_scheduler(const SocketChoice& choice) {
  for (size_t i = 0; i < choice.candidates.size(); ++i) {
    if (!choice.ready(i, false)) continue;  // the user's directory is not there: nobody is
    if (auto connection = SchedulerConnection::connect(choice.candidates[i]))
      return {choice.candidates[i], choice.control(i), std::move(connection)};
  }
  const size_t last = choice.candidates.size() - 1;
  const std::string& socket = choice.candidates[last];
  const std::string control = choice.control(last);
  if (!auto_start_enabled()) return {socket, control, std::nullopt};
  const fs::path program = locate_scheduler();
  choice.ready(last, true);
  prepare_socket_dirs(choice, socket, control);
  {
    const StartLock lock(socket + ".lock");
    // Someone may have started it while we waited for the lock.
    if (!answering(socket)) start_daemon(program, socket, control);
  }
  if (auto connection = SchedulerConnection::connect(socket)) return {socket, control, std::move(connection)};
  throw Error(ExitCode::kFailure, fmt::format("the scheduler started on {} but stopped answering", socket));
}

}  // namespace cuslice::cli
