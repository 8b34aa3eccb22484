// replies.h: sendmsg with SCM_RIGHTS for registrations, send for the rest.
#include "scheduler/clients/replies.h"

#include <sys/socket.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

namespace cuslice {

void send_register_reply(int fd, wire::RegisterReply reply, const std::string& message, int region, int segment) {
  std::strncpy(reply.message, message.c_str(), sizeof reply.message - 1);
  iovec iov{&reply, sizeof reply};
  const int fds[2] = {region, segment};
  const size_t count = region < 0 ? 0 : segment < 0 ? 1 : 2;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof fds)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (count > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(count * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(count * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds, count * sizeof(int));
  }
  if (sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(sizeof reply))
    spdlog::warn("could not send a registration reply: {}", std::strerror(errno));
}

void send_control_reply(int fd, const wire::ControlReply& reply) {
  if (send(fd, &reply, sizeof reply, MSG_NOSIGNAL | MSG_DONTWAIT) != sizeof reply)
    spdlog::warn("could not send a control reply: {}", std::strerror(errno));
}

void send_whole(int fd, const void* data, size_t size, const char* what) {
  if (send(fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(size))
    spdlog::warn("could not send {}: {}", what, std::strerror(errno));
}

void fill_message(char (&message)[sizeof wire::ControlReply::message], const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) {
    if (text.size() + line.size() + 1 + 4 >= sizeof message) {
      text += "...\n";
      break;
    }
    text += line + "\n";
  }
  std::strncpy(message, text.c_str(), sizeof message - 1);
}

}  // namespace cuslice
