// The fake MPS control daemon (nvidia-cuda-mps-control -f / -d): owns its pipe directory's
// socket, lock and generation file, its control.log, the clients' connections and its "server"
// (a child process standing in for nvidia-cuda-mps-server, so that get_server_list names a live
// pid). It never touches a client's driver state: clients learn that their server ended from
// the generation file (mps_wire.h).
//
// The server starts at the first client's hello and ends when a client reports a fatal fault
// (the generation is bumped: every client of the old one gets CUDA_ERROR_MPS_CLIENT_TERMINATED;
// the next client starts a new server) or when the daemon stops (quit, SIGTERM, SIGINT), which
// bumps the generation too and removes the socket and the generation file.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace fake_mps {

class ControlDaemon {
 public:
  ControlDaemon(std::string pipe_directory, std::string log_directory);
  ~ControlDaemon();
  ControlDaemon(const ControlDaemon&) = delete;
  ControlDaemon& operator=(const ControlDaemon&) = delete;

  // Takes the pipe directory (creating it and the log directory): the lock, the generation file
  // and the socket, bound but not yet listening. False, with *error set, when another daemon
  // holds it or a file cannot be made.
  bool claim(std::string* error);
  // From now on clients can connect (and nothing can before: the pid file is written first).
  bool listen_now(std::string* error);
  // Writes <pipe directory>/nvidia-cuda-mps-control.pid: the pid of the process that serves
  // (a daemonising parent writes its child's before it returns). False when it cannot.
  bool write_pid_file(pid_t pid) const;
  // Serves until quit or a signal; returns the exit status (0).
  int run();

 private:
  struct Client {
    int fd = -1;
    pid_t pid = 0;
    std::uint64_t generation = 0;
  };

  void log(const char* format, ...) __attribute__((format(printf, 2, 3)));
  bool open_generation_file(std::string* error);
  bool open_socket(std::string* error);
  void serve_connection(int fd);
  void hello(int fd, const std::string& line);
  void fault(int fd, const std::string& line);
  void command(int fd, const std::string& text);
  void client_readable(std::size_t index);
  bool start_server(uid_t uid);
  void end_server(const char* why);
  void reap_server();
  void shut_down(const char* why);

  std::string pipe_directory_;
  std::string log_directory_;
  std::FILE* log_ = nullptr;
  int lock_fd_ = -1;
  int listen_fd_ = -1;
  int signal_fd_ = -1;
  std::atomic<std::uint64_t>* generation_ = nullptr;  // mapped generation file
  pid_t server_ = 0;                                  // 0: no server running
  std::vector<Client> clients_;
  bool quitting_ = false;
};

}  // namespace fake_mps
