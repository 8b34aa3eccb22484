// ScopedScheduler (scoped_scheduler.h): fork and exec of the daemon, the polls for its socket
// and segment, and the cleanup of what it leaves (a killed daemon leaves its segment).
#include "tests/kit/scoped_scheduler.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace cuslice::test_kit {

namespace {

bool segment_exists(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return false;
  close(fd);
  return true;
}

}  // namespace

ScopedScheduler::ScopedScheduler(const std::string& name) {
  std::string templ = "/tmp/" + name + "-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp: " + std::string(strerror(errno)));
  dir_ = templ;
  socket_ = dir_ + "/cuslice.sock";
  config_ = dir_ + "/cuslice.yaml";
  log_ = dir_ + "/scheduler.log";
  shm_name_ = "/" + std::filesystem::path(dir_).filename().string();
}

ScopedScheduler::~ScopedScheduler() {
  stop(SIGTERM);
  if (::testing::Test::HasFailure()) {
    const std::string text = log();
    if (!text.empty()) std::fprintf(stderr, "--- cuslice-scheduler's log (%s)\n%s", log_.c_str(), text.c_str());
  }
  if (segment_exists(shm_name_)) shm_unlink(shm_name_.c_str());
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
  // The control socket's folder, beside this one (protocol/control_socket.h).
  std::filesystem::remove_all(dir_ + "-control", ignored);
}

const char* ScopedScheduler::binary() { return CUSLICE_KIT_SCHEDULER_PATH; }

void ScopedScheduler::write_config(const std::string& yaml) const { std::ofstream(config_) << yaml; }

std::vector<std::string> ScopedScheduler::command(const std::vector<std::string>& extra) const {
  std::vector<std::string> argv{binary(), "--config", config_, "--socket", socket_, "--shm-name", shm_name_};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

::testing::AssertionResult ScopedScheduler::start(const std::vector<std::string>& extra,
                                                   std::chrono::milliseconds timeout) {
  if (!std::filesystem::exists(config_)) write_config("");
  const std::vector<std::string> args = command(extra);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const int log_fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  pid_ = fork();
  if (pid_ == 0) {
    unsetenv("LD_PRELOAD");  // the tests may run under the hook; the daemon never does
    if (log_fd >= 0) {
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (log_fd >= 0) close(log_fd);
  if (pid_ < 0) return ::testing::AssertionFailure() << "fork: " << strerror(errno);
  // It listens before it publishes the segment: wait for both.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!listening() || !segment_exists(shm_name_)) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return ::testing::AssertionFailure() << "cuslice-scheduler exited (status " << status << "):\n" << log();
    }
    if (std::chrono::steady_clock::now() > deadline)
      return ::testing::AssertionFailure() << "cuslice-scheduler did not start within " << timeout.count()
                                           << " ms:\n" << log();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return ::testing::AssertionSuccess();
}

int ScopedScheduler::stop(int signal) {
  if (pid_ <= 0) return -1;
  kill(pid_, signal);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool ScopedScheduler::listening() const {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_.c_str(), sizeof addr.sun_path - 1);
  const int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  const bool ok = connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(s);
  return ok;
}

std::string ScopedScheduler::log() const {
  std::ifstream in(log_);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace cuslice::test_kit
