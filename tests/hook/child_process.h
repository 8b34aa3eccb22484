// Child processes for the hook's multi-process tests: spawn one (this binary re-run with a
// gtest filter, or the scheduler daemon) with pipes on its stdin and stdout, read a line it
// prints, wait for its exit; and a scheduler daemon started for one test with a given
// configuration.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

extern char** environ;

namespace hook_test {

struct Child {
  pid_t pid = -1;
  int in = -1;   // its stdin
  int out = -1;  // its stdout
};

// Starts `args` with this process's environment plus `extra_env` (which wins), without
// LD_PRELOAD unless `preload`, and without the variables named in `drop`.
inline Child spawn(const std::vector<std::string>& args, const std::vector<std::string>& extra_env, bool preload,
                   const std::vector<std::string>& drop = {}) {
  const auto named = [](const char* entry, const std::string& name) {
    return std::strncmp(entry, name.c_str(), name.size()) == 0 && entry[name.size()] == '=';
  };
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    bool keep = preload || !named(*e, "LD_PRELOAD");
    for (const std::string& d : drop) keep = keep && !named(*e, d);
    for (const std::string& x : extra_env) keep = keep && !named(*e, x.substr(0, x.find('=')));
    if (keep) env.emplace_back(*e);
  }
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int in[2], out[2];
  EXPECT_EQ(pipe2(in, O_CLOEXEC), 0);
  EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  Child c;
  EXPECT_EQ(posix_spawn(&c.pid, argv[0], &fa, nullptr, argv.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  c.in = in[1];
  c.out = out[0];
  return c;
}

// Closes its stdin (the tests' children hold until then) and returns its exit status
// (128 + signal when killed).
inline int wait_exit(Child& c) {
  if (c.in >= 0) close(c.in);
  int status = 0;
  waitpid(c.pid, &status, 0);
  if (c.out >= 0) close(c.out);
  c.in = c.out = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// In a child: returns once the parent closes the child's stdin (wait_exit() does), so the
// child holds what it set up until then.
inline void wait_for_stdin_to_close() {
  char c;
  while (read(0, &c, 1) > 0) {
  }
}

// One line of the child's stdout, without its newline; false at its end.
inline bool next_line(int fd, std::string* line) {
  line->clear();
  char c;
  while (read(fd, &c, 1) == 1) {
    if (c == '\n') return true;
    *line += c;
  }
  return false;
}

// Reads the child's stdout until a line equal to `want` (true) or its end (false).
inline bool read_line(int fd, const char* want) {
  std::string line;
  while (next_line(fd, &line))
    if (line == want) return true;
  return false;
}

// Reads the child's stdout until a line that begins with `prefix` (true, the line in *got) or
// its end (false).
inline bool read_line(int fd, const char* prefix, std::string* got) {
  while (next_line(fd, got))
    if (got->rfind(prefix, 0) == 0) return true;
  return false;
}

// A cuslice-scheduler of this test's own (socket and segment named after the test process),
// started with `config_yaml`; stopped with SIGTERM at destruction.
class Scheduler {
 public:
  explicit Scheduler(const std::string& config_yaml) {
    dir_ = "/tmp/cuslice-hook-test-" + std::to_string(getpid());
    mkdir(dir_.c_str(), 0700);
    socket_ = dir_ + "/cuslice.sock";
    shm_ = "/cuslice-hook-test-" + std::to_string(getpid());
    std::ofstream(dir_ + "/config.yaml") << config_yaml;
    daemon_ = spawn({CUSLICE_SCHEDULER_PATH, "--config", dir_ + "/config.yaml", "--socket", socket_,
                     "--shm-name", shm_},
                    {}, /*preload=*/false);
    for (int i = 0; i < 100 && access(socket_.c_str(), F_OK) != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ~Scheduler() {
    kill(daemon_.pid, SIGTERM);
    wait_exit(daemon_);
    std::remove((dir_ + "/config.yaml").c_str());
    rmdir(dir_.c_str());
    // The control socket's directory, beside this one (protocol/control_socket.h).
    std::remove((dir_ + "-control/cuslice.sock.scheduler.lock").c_str());
    rmdir((dir_ + "-control").c_str());
  }
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  bool running() const { return access(socket_.c_str(), F_OK) == 0; }
  const std::string& socket() const { return socket_; }

 private:
  std::string dir_, socket_, shm_;
  Child daemon_;
};

}  // namespace hook_test
