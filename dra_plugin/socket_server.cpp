#include "dra_plugin/socket_server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>

namespace cuslice::dra {

SocketServer::SocketServer(const std::string& path, std::vector<grpc::Service*> services) : path_(path) {
  unlink(path_.c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + path_, grpc::InsecureServerCredentials());
  for (grpc::Service* s : services) builder.RegisterService(s);
  server_ = builder.BuildAndStart();
  if (!server_) throw std::runtime_error("cannot serve on " + path_);
  struct stat st {};
  if (stat(path_.c_str(), &st) == 0) inode_ = st.st_ino;
}

SocketServer::~SocketServer() {
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
  if (present()) unlink(path_.c_str());
}

bool SocketServer::present() const {
  struct stat st {};
  return stat(path_.c_str(), &st) == 0 && st.st_ino == inode_;
}

}  // namespace cuslice::dra
