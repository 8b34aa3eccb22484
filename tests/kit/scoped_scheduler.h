// The C++ tests' one way to run a cuslice-scheduler of their own: a private runtime folder
// (socket, configuration, the daemon's log) and segment name, the daemon started there and
// waited for, stopped and cleaned up when the object goes. Owns that daemon's life and its
// files; never talks the protocol (the tests' client library does) nor reads the segment.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace cuslice::test_kit {

class ScopedScheduler {
 public:
  // `name` prefixes the folder (/tmp/<name>-XXXXXX) and the segment (/<name>-XXXXXX).
  explicit ScopedScheduler(const std::string& name = "cuslice-test");
  ~ScopedScheduler();  // SIGTERM, then the folder, the control socket's and the segment go
  ScopedScheduler(const ScopedScheduler&) = delete;
  ScopedScheduler& operator=(const ScopedScheduler&) = delete;

  // The daemon this build made (empty where a hook built elsewhere comes without one).
  static const char* binary();

  void write_config(const std::string& yaml) const;
  // The daemon's command line on this folder: --config, --socket, --shm-name, then `extra`.
  std::vector<std::string> command(const std::vector<std::string>& extra = {}) const;
  // Starts it (without LD_PRELOAD, its output in log_path()) and waits until it listens and has
  // published its segment; a failure says why, with the log.
  ::testing::AssertionResult start(const std::vector<std::string>& extra = {},
                                   std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // Sends `signal` and waits for the exit; the exit status (128 + signal when killed), -1 when
  // none runs.
  int stop(int signal = SIGTERM);

  bool listening() const;  // a connection to the socket is accepted
  pid_t pid() const { return pid_; }
  std::string log() const;
  const std::string& dir() const { return dir_; }
  const std::string& socket() const { return socket_; }
  const std::string& config_path() const { return config_; }
  const std::string& log_path() const { return log_; }
  const std::string& shm_name() const { return shm_name_; }

 private:
  std::string dir_, socket_, config_, log_, shm_name_;
  pid_t pid_ = -1;
};

}  // namespace cuslice::test_kit
