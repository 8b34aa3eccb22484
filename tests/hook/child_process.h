// Child processes for the hook's multi-process tests: spawn one (this binary re-run with a
// gtest filter, or the scheduler daemon) with pipes on its stdin and stdout, read a line it
// prints, wait for its exit; and a scheduler daemon started for one test with a given
// configuration (the test kit's ScopedScheduler).
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

#include "tests/kit/scoped_scheduler.h"

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

// A cuslice-scheduler of this test's own (tests/kit/scoped_scheduler.h), started with
// `config_yaml`; stopped with SIGTERM at destruction.
class Scheduler : public cuslice::test_kit::ScopedScheduler {
 public:
  explicit Scheduler(const std::string& config_yaml) : ScopedScheduler("cuslice-hook-test") {
    write_config(config_yaml);
    EXPECT_TRUE(start());
  }
  bool running() const { return listening(); }
};

}  // namespace hook_test
