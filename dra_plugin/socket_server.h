// A gRPC server on a Unix socket, the socket file made when it starts and removed when it
// stops (unless someone else's has replaced it): the plugin socket the kubelet calls and the
// registration socket its plugin watcher finds.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

namespace cuslice::dra {

class SocketServer {
 public:
  // Serves `services` on `path`, replacing a socket file left there; throws when it cannot.
  SocketServer(const std::string& path, std::vector<grpc::Service*> services);
  ~SocketServer();
  SocketServer(const SocketServer&) = delete;
  SocketServer& operator=(const SocketServer&) = delete;

  // The socket file is still the one this server made (the kubelet's cleanup removes sockets).
  bool present() const;

 private:
  std::string path_;
  ino_t inode_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace cuslice::dra
