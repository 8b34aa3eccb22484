// The fake MPS control daemon's loop (control_daemon.h): one thread, poll over the signals, the
// listening socket and the clients' kept connections. Each request is short (one line, read with
// a timeout) and answered at once.
#include "tests/fake_driver/mps/control_daemon.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <sstream>

#include "tests/fake_driver/mps/mps_wire.h"

namespace fake_mps {
namespace {

constexpr int kRequestTimeoutMs = 2'000;

// mkdir -p; false with errno set.
bool make_directories(const std::string& path) {
  for (std::size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    const std::string prefix = path.substr(0, at);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

std::string absolute(const std::string& path) {
  char resolved[PATH_MAX];
  return realpath(path.c_str(), resolved) != nullptr ? std::string(resolved) : path;
}

std::string failure(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

uid_t peer_uid(int fd) {
  ucred credentials{};
  socklen_t length = sizeof credentials;
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0 ? credentials.uid : getuid();
}

// The stand-in for nvidia-cuda-mps-server: a child that does nothing until it is killed, and
// dies with the daemon.
[[noreturn]] void be_server(pid_t daemon) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != daemon) _exit(0);
  for (int fd = 3; fd < 1024; ++fd) close(fd);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (;;) pause();
}

}  // namespace

ControlDaemon::ControlDaemon(std::string pipe_directory, std::string log_directory)
    : pipe_directory_(std::move(pipe_directory)), log_directory_(std::move(log_directory)) {}

// Closes what it holds; removing the files is shut_down's (a daemonising parent leaves them).
ControlDaemon::~ControlDaemon() {
  for (const Client& client : clients_) close(client.fd);
  for (int fd : {listen_fd_, signal_fd_, lock_fd_}) {
    if (fd >= 0) close(fd);
  }
  if (generation_ != nullptr) munmap(generation_, sizeof *generation_);
  if (log_ != nullptr) std::fclose(log_);
}

void ControlDaemon::log(const char* format, ...) {
  if (log_ == nullptr) return;
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  tm local{};
  localtime_r(&now.tv_sec, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &local);
  std::fprintf(log_, "[%s.%03ld Control %d] ", stamp, now.tv_nsec / 1'000'000, static_cast<int>(getpid()));
  va_list arguments;
  va_start(arguments, format);
  std::vfprintf(log_, format, arguments);
  va_end(arguments);
  std::fputc('\n', log_);
  std::fflush(log_);
}

bool ControlDaemon::claim(std::string* error) {
  if (!make_directories(pipe_directory_)) return *error = failure("cannot create", pipe_directory_), false;
  if (!make_directories(log_directory_)) return *error = failure("cannot create", log_directory_), false;
  pipe_directory_ = absolute(pipe_directory_);
  log_directory_ = absolute(log_directory_);
  const std::string lock = join_path(pipe_directory_, kLockName);
  lock_fd_ = open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) return *error = failure("cannot open", lock), false;
  if (flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    *error = "An instance of this daemon is already running (pipe directory " + pipe_directory_ + ")";
    return false;
  }
  const std::string log_path = join_path(log_directory_, "control.log");
  log_ = std::fopen(log_path.c_str(), "ae");
  if (log_ == nullptr) return *error = failure("cannot open", log_path), false;
  if (!open_generation_file(error) || !open_socket(error)) return false;
  sigset_t handled;
  sigemptyset(&handled);
  for (int number : {SIGTERM, SIGINT, SIGCHLD}) sigaddset(&handled, number);
  sigprocmask(SIG_BLOCK, &handled, nullptr);
  signal_fd_ = signalfd(-1, &handled, SFD_CLOEXEC);
  if (signal_fd_ < 0) return *error = std::string("signalfd: ") + std::strerror(errno), false;
  ::signal(SIGPIPE, SIG_IGN);
  return true;
}

// A fresh file (never one a client of a killed daemon still maps), at generation 1.
bool ControlDaemon::open_generation_file(std::string* error) {
  const std::string path = join_path(pipe_directory_, kGenerationName);
  unlink(path.c_str());
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 || ftruncate(fd, sizeof *generation_) != 0) {
    *error = failure("cannot create", path);
    if (fd >= 0) close(fd);
    return false;
  }
  void* mapped = mmap(nullptr, sizeof *generation_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (mapped == MAP_FAILED) return *error = failure("cannot map", path), false;
  generation_ = static_cast<std::atomic<std::uint64_t>*>(mapped);
  generation_->store(1);
  return true;
}

bool ControlDaemon::open_socket(std::string* error) {
  const std::string path = join_path(pipe_directory_, kSocketName);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) return *error = "socket path too long: " + path, false;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  unlink(path.c_str());  // left by a daemon that was killed (the lock says none runs)
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    return *error = failure("cannot bind", path), false;
  }
  return true;
}

bool ControlDaemon::listen_now(std::string* error) {
  if (listen(listen_fd_, 64) == 0) return true;
  *error = failure("cannot listen on", join_path(pipe_directory_, kSocketName));
  return false;
}

bool ControlDaemon::write_pid_file(pid_t pid) const {
  const std::string path = join_path(pipe_directory_, kPidFileName);
  std::FILE* file = std::fopen(path.c_str(), "we");
  if (file == nullptr) return false;
  const bool written = std::fprintf(file, "%d\n", static_cast<int>(pid)) > 0;
  return std::fclose(file) == 0 && written;
}

int ControlDaemon::run() {
  log("Starting control daemon using socket %s", join_path(pipe_directory_, kSocketName).c_str());
  while (!quitting_) {
    std::vector<pollfd> fds{{signal_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (const Client& client : clients_) fds.push_back({client.fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      shut_down(std::strerror(errno));
      return 1;
    }
    if (fds[0].revents != 0) {
      signalfd_siginfo info{};
      if (read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        if (info.ssi_signo == SIGCHLD) {
          reap_server();
        } else {
          log("Received signal %s", strsignal(static_cast<int>(info.ssi_signo)));
          shut_down("signal");
        }
      }
      continue;
    }
    // From the last: a client that left is erased without moving the ones before it.
    for (std::size_t i = fds.size() - 2; i-- > 0;) {
      if (fds[i + 2].revents != 0) client_readable(i);
    }
    if ((fds[1].revents & POLLIN) != 0) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) serve_connection(fd);
    }
  }
  return 0;
}

void ControlDaemon::serve_connection(int fd) {
  timeval timeout{kRequestTimeoutMs / 1000, (kRequestTimeoutMs % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  std::string line;
  if (!read_line(fd, &line)) {
    close(fd);
    return;
  }
  if (line.rfind("hello ", 0) == 0) return hello(fd, line);  // keeps fd
  if (line.rfind("fault ", 0) == 0) {
    fault(fd, line);
  } else if (line == "command" || line.rfind("command ", 0) == 0) {
    command(fd, line.size() > 8 ? line.substr(8) : std::string());
  } else {
    send_text(fd, "Error: not a request of this daemon\n");
  }
  if (fd != -1) close(fd);
}

void ControlDaemon::hello(int fd, const std::string& line) {
  const uid_t uid = peer_uid(fd);
  if (server_ == 0 && !start_server(uid)) {
    send_text(fd, "error cannot start a server\n");
    close(fd);
    return;
  }
  Client client{fd, static_cast<pid_t>(std::atoi(word_value(line, "pid").c_str())), generation_->load()};
  log("NEW CLIENT %d from user %u: server %d, active thread percentage %s, priority %s, "
      "pinned device memory limit %s",
      static_cast<int>(client.pid), static_cast<unsigned>(uid), static_cast<int>(server_),
      word_value(line, "percentage").c_str(), word_value(line, "priority").c_str(),
      word_value(line, "pinned").c_str());
  std::ostringstream answer;
  answer << "ok generation=" << client.generation << " server=" << server_ << "\n";
  if (!send_text(fd, answer.str())) {
    close(fd);
    return;
  }
  clients_.push_back(client);
}

void ControlDaemon::fault(int fd, const std::string& line) {
  const std::string pid = word_value(line, "pid");
  const std::string kernel = word_value(line, "kernel");
  const std::uint64_t of = std::strtoull(word_value(line, "generation").c_str(), nullptr, 10);
  if (of == generation_->load() && server_ != 0) {
    log("Client %s faulted in kernel %s: CUDA_ERROR_ILLEGAL_ADDRESS", pid.c_str(), kernel.c_str());
    end_server(("client " + pid + " faulted").c_str());
  } else {
    log("Client %s faulted in kernel %s after its server had ended", pid.c_str(), kernel.c_str());
  }
  send_text(fd, "ok generation=" + std::to_string(generation_->load()) + "\n");
}

void ControlDaemon::command(int fd, const std::string& text) {
  std::istringstream words(text);
  std::string verb, argument;
  words >> verb >> argument;
  if (verb.empty()) return;
  log("Command: %s", text.c_str());
  if (verb == "quit") {
    shut_down("quit command");  // the socket is gone before the asker sees its answer end
    return;
  }
  std::ostringstream answer;
  if (verb == "get_server_list") {
    if (server_ != 0) answer << server_ << "\n";
  } else if (verb == "get_client_list") {
    for (const Client& client : clients_) {
      if (server_ != 0 && argument == std::to_string(server_) && client.generation == generation_->load())
        answer << client.pid << "\n";
    }
  } else {
    answer << "Error: unknown command: " << text << "\n";
  }
  send_text(fd, answer.str());
}

void ControlDaemon::client_readable(std::size_t index) {
  char buffer[256];
  const ssize_t n = read(clients_[index].fd, buffer, sizeof buffer);
  if (n > 0 || (n < 0 && errno == EINTR)) return;  // clients send nothing more; ignored
  log("Client %d disconnected", static_cast<int>(clients_[index].pid));
  close(clients_[index].fd);
  clients_.erase(clients_.begin() + static_cast<std::ptrdiff_t>(index));
}

bool ControlDaemon::start_server(uid_t uid) {
  const pid_t daemon = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    log("Cannot start a server: %s", std::strerror(errno));
    return false;
  }
  if (pid == 0) be_server(daemon);
  server_ = pid;
  log("Starting new server %d for user %u (generation %llu)", static_cast<int>(pid), static_cast<unsigned>(uid),
      static_cast<unsigned long long>(generation_->load()));
  return true;
}

// The server's clients are terminated: the generation moves on, and the next client starts a
// new server.
void ControlDaemon::end_server(const char* why) {
  if (server_ != 0) {
    kill(server_, SIGKILL);
    waitpid(server_, nullptr, 0);
    log("Server %d exited: %s", static_cast<int>(server_), why);
    server_ = 0;
  }
  const std::uint64_t next = generation_->fetch_add(1) + 1;
  log("Server generation is now %llu", static_cast<unsigned long long>(next));
}

void ControlDaemon::reap_server() {
  int status = 0;
  for (pid_t pid; (pid = waitpid(-1, &status, WNOHANG)) > 0;) {
    if (pid != server_) continue;
    server_ = 0;
    log("Server %d exited unexpectedly", static_cast<int>(pid));
    end_server("it exited");
  }
}

void ControlDaemon::shut_down(const char* why) {
  quitting_ = true;
  end_server(why);
  unlink(join_path(pipe_directory_, kSocketName).c_str());
  unlink(join_path(pipe_directory_, kGenerationName).c_str());
  unlink(join_path(pipe_directory_, kPidFileName).c_str());
  log("Exiting (%s)", why);
}

}  // namespace fake_mps
