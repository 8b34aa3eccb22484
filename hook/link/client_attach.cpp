// Attaching to the scheduler: registration over the socket, mapping the segment it names
// (read-only, after checking its owner) and the tenant region the reply carries, noticing a
// lost daemon and attaching again, detach and fork. Also what the process tells the daemon
// about itself (its cards, its Kubernetes workload). Calls the socket, shm_open and mmap, on
// the attach paths only; the memory and token files only read the attachment it publishes.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "hook/link/client.h"
#include "hook/link/client_mapping.h"
#include "hook/link/client_state.h"
#include "protocol/socket_protocol.h"

namespace cuslice::client {
namespace internal {

constinit State g;

bool connection_lost(const Attachment* att) {
  if (att->segment->state.load(std::memory_order_acquire) !=
      static_cast<uint32_t>(shm::DaemonState::kRunning))
    return true;
  pollfd p{g.fd.load(std::memory_order_relaxed), POLLIN, 0};
  return poll(&p, 1, 0) != 0;
}

void mark_lost(Attachment* att) {
  if (!g.current.compare_exchange_strong(att, nullptr, std::memory_order_acq_rel)) return;
  g.next_attempt_ns.store(now_ns() + int64_t{kReattachIntervalSeconds} * 1'000'000'000,
                          std::memory_order_relaxed);
  if (EventCallback cb = g.callback.load(std::memory_order_acquire))
    cb(Event::kLost, "the scheduler went away: compute ungated, memory on local limits");
}

void set_error(const char* what, const char* detail) {
  snprintf(g.error, sizeof g.error, "%s%s%s", what, detail[0] ? ": " : "", detail);
}

void close_both(const int (&fds)[2]) {
  for (const int fd : fds)
    if (fd >= 0) close(fd);
}

void send_blocker_claim(int fd) noexcept {
  wire::BlockerClaim claim;
  claim.flags = g.checkpoint_flags.load(std::memory_order_relaxed);
  if (fd >= 0 && claim.flags != 0) send(fd, &claim, sizeof claim, MSG_DONTWAIT | MSG_NOSIGNAL);
}

}  // namespace internal

using namespace internal;

namespace {

constexpr int kReplyTimeoutMs = 500;
constexpr int64_t kHealthCheckNs = 100'000'000;  // maintain() polls the socket at most this often

// Receives the registration reply and, with it, the descriptors it carries: the first two in
// `fds` (-1 where none came), any other closed.
bool receive_reply(int s, wire::RegisterReply& reply, int (&fds)[2]) {
  fds[0] = fds[1] = -1;
  iovec iov{&reply, sizeof reply};
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = recvmsg(s, &msg, MSG_CMSG_CLOEXEC);
  if (n < 0) return false;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int received;
      memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof received);
      if (fds[0] < 0) fds[0] = received;
      else if (fds[1] < 0) fds[1] = received;
      else close(received);
    }
  }
  return n == static_cast<ssize_t>(sizeof reply);
}

// What the hook learnt of the cards, in the tenant region: every hook writes the same values,
// and the daemon publishes them in the segment.
void publish_devices(const Attachment* att) {
  for (uint32_t i = 0; i < kMaxGpus; ++i) {
    shm::TenantGpuUse& use = att->use(static_cast<int>(i));
    if (const uint64_t total = g.device_memory[i].load(std::memory_order_relaxed))
      use.memory_total.store(total, std::memory_order_relaxed);
    const uint64_t lo = g.device_uuid[i][0].load(std::memory_order_relaxed);
    const uint64_t hi = g.device_uuid[i][1].load(std::memory_order_relaxed);
    if (lo != 0 || hi != 0) {
      use.uuid[0].store(lo, std::memory_order_relaxed);
      use.uuid[1].store(hi, std::memory_order_relaxed);
    }
  }
}

// Tells the daemon which Kubernetes workload this process is, when the pod's environment
// says (socket_protocol.h, WorkloadMessage); labels for the tenant's metrics, nothing else.
void send_workload(int fd) {
  const char* ns = getenv(wire::kPodNamespaceEnv);
  const char* pod = getenv(wire::kPodNameEnv);
  const char* container = getenv(wire::kContainerNameEnv);
  if (fd < 0 || (!ns && !pod && !container)) return;
  wire::WorkloadMessage msg;
  if (ns) strncpy(msg.pod_namespace, ns, sizeof msg.pod_namespace - 1);
  if (pod) strncpy(msg.pod_name, pod, sizeof msg.pod_name - 1);
  if (container) strncpy(msg.container_name, container, sizeof msg.container_name - 1);
  send(fd, &msg, sizeof msg, MSG_DONTWAIT | MSG_NOSIGNAL);  // lost: only labels are missing
}

// Connects to the scheduler's socket (CUSLICE_SOCKET, else the default path). The socket, or
// -1 with `failure` saying why.
int connect_to_daemon(AttachStatus& failure) {
  const char* path = getenv(wire::kSocketEnv);
  if (path == nullptr || path[0] == '\0') path = wire::kDefaultSocketPath;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof addr.sun_path) {
    set_error("socket path too long", path);
    failure = AttachStatus::kFailed;
    return -1;
  }
  strcpy(addr.sun_path, path);

  const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) {
    set_error("socket", strerror(errno));
    failure = AttachStatus::kFailed;
    return -1;
  }
  // A Unix-socket connect completes or fails at once. EAGAIN: the backlog is full, so a
  // scheduler listens but takes no connection now (busy, not absent).
  if (connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int error = errno;
    set_error(error == EAGAIN ? "the scheduler is not accepting connections now" : "no scheduler listening",
              strerror(error));
    close(s);
    failure = error == EAGAIN ? AttachStatus::kBusy : AttachStatus::kNoDaemon;
    return -1;
  }
  return s;
}

// Sends the registration over `s` and receives the daemon's acceptance, with the descriptors
// of the tenant region and the segment in `fds`. false: no acceptance (`failure` says why),
// and the descriptors and `s` are closed.
bool exchange_registration(int s, wire::RegisterReply& reply, int (&fds)[2], AttachStatus& failure) {
  wire::RegisterRequest req;
  if (const char* tenant = getenv(wire::kTenantEnv)) strncpy(req.tenant, tenant, sizeof req.tenant - 1);
  for (uint32_t i = 0; i < kMaxGpus; ++i) req.charged[i] = g.local_charged[i].load(std::memory_order_relaxed);

  pollfd p{s, POLLIN, 0};
  if (send(s, &req, sizeof req, MSG_NOSIGNAL) != sizeof req) {
    // Connected, so a scheduler is there: it closed the connection first (it had no room for
    // it, and said so), and is waited for like a full one.
    set_error("cannot send the registration", strerror(errno));
    close(s);
    failure = AttachStatus::kBusy;
    return false;
  }
  fds[0] = fds[1] = -1;
  if (poll(&p, 1, kReplyTimeoutMs) != 1) {
    // Connected, so a scheduler is there: queued behind others, it has no room for us yet.
    set_error("the scheduler did not answer the registration in time", "");
    close(s);
    failure = AttachStatus::kBusy;
    return false;
  }
  if (!receive_reply(s, reply, fds) || reply.magic != wire::kMagic) {
    // Connected, so a scheduler is there; one that closes without an answer (it had no room
    // for the connection, or it is stopping) is waited for like a full one, never taken
    // for no scheduler at all.
    set_error("no valid reply from the scheduler", "");
    close_both(fds);
    close(s);
    failure = AttachStatus::kBusy;
    return false;
  }
  if (reply.version != wire::kVersion) {
    set_error("the scheduler speaks another protocol version", "");
    close_both(fds);
    close(s);
    failure = AttachStatus::kFailed;
    return false;
  }
  reply.message[sizeof reply.message - 1] = '\0';
  if (reply.status != wire::RegisterStatus::kOk) {
    set_error("the scheduler refused this process", reply.message);
    close_both(fds);
    close(s);
    if (reply.status == wire::RegisterStatus::kFull) {
      set_error("no process slot for it", reply.message);
      failure = AttachStatus::kBusy;
      return false;
    }
    if (reply.status != wire::RegisterStatus::kRefused) {
      failure = AttachStatus::kFailed;
      return false;
    }
    g.refused.store(true, std::memory_order_relaxed);
    failure = AttachStatus::kRefused;
    return false;
  }
  return true;
}

// Makes `att` the current attachment and `s` the connection (under the number of the one
// before, if any: State::fd says why), and tells the daemon what this process knows of its
// cards and workload.
void publish_attachment(int s, Attachment* att) {
  // A new slot counts no waiter of ours: a parked demand is published again by token_try.
  for (auto& p : g.parked) p.store(false, std::memory_order_relaxed);
  const int old = g.fd.load(std::memory_order_relaxed);
  if (old >= 0 && dup3(s, old, O_CLOEXEC) == old) {
    close(s);
  } else {
    if (old >= 0) close(old);
    g.fd.store(s, std::memory_order_relaxed);
  }
  g.error[0] = '\0';
  att->self().checkpoint_flags.fetch_or(g.checkpoint_flags.load(std::memory_order_relaxed), std::memory_order_relaxed);
  // The slot's previous process may have left its warm-up marks: none of them are ours.
  att->self().young_gpus.store(0, std::memory_order_relaxed);
  att->self().young_until_ns.store(0, std::memory_order_relaxed);
  g.current.store(att, std::memory_order_release);
  publish_devices(att);
  send_workload(g.fd.load(std::memory_order_relaxed));
  send_blocker_claim(g.fd.load(std::memory_order_relaxed));  // what it said to an earlier daemon
}

// One registration attempt; the caller holds g.attaching.
AttachStatus register_now() {
  AttachStatus failure = AttachStatus::kFailed;
  const int s = connect_to_daemon(failure);
  if (s < 0) return failure;
  wire::RegisterReply reply;
  int fds[2] = {-1, -1};
  if (!exchange_registration(s, reply, fds, failure)) return failure;
  Attachment* att = map_attachment(s, reply, fds);
  if (att == nullptr) return AttachStatus::kFailed;
  publish_attachment(s, att);
  return AttachStatus::kAttached;
}

class AttachLock {
 public:
  explicit AttachLock(bool wait) {
    bool expected = false;
    while (!(held_ = g.attaching.compare_exchange_weak(expected, true, std::memory_order_acquire))) {
      if (!wait) return;
      expected = false;
      sched_yield();
    }
  }
  ~AttachLock() {
    if (held_) g.attaching.store(false, std::memory_order_release);
  }
  bool held() const { return held_; }

 private:
  bool held_ = false;
};

}  // namespace

AttachStatus attach() noexcept {
  AttachLock lock(/*wait=*/true);
  if (g.current.load(std::memory_order_acquire)) return AttachStatus::kAttached;
  if (g.refused.load(std::memory_order_relaxed)) return AttachStatus::kRefused;
  AttachStatus status = register_now();
  // A scheduler without room now may have some in a moment (a process exits, a silent
  // connection is closed): wait a little rather than fail, never run ungated meanwhile.
  const int64_t give_up = now_ns() + int64_t{kBusyWaitSeconds} * 1'000'000'000;
  while (status == AttachStatus::kBusy && now_ns() < give_up) {
    const timespec pause{0, 100'000'000};
    nanosleep(&pause, nullptr);
    status = register_now();
  }
  if (status != AttachStatus::kAttached) {
    g.next_attempt_ns.store(now_ns() + int64_t{kReattachIntervalSeconds} * 1'000'000'000,
                            std::memory_order_relaxed);
  }
  return status;
}

bool attached() noexcept { return g.current.load(std::memory_order_acquire) != nullptr; }

const char* last_error() noexcept { return g.error; }

void set_event_callback(EventCallback callback) noexcept {
  g.callback.store(callback, std::memory_order_release);
}

void maintain() noexcept {
  const int64_t now = now_ns();
  if (Attachment* att = g.current.load(std::memory_order_acquire)) {
    if (now < g.next_check_ns.load(std::memory_order_relaxed)) return;
    g.next_check_ns.store(now + kHealthCheckNs, std::memory_order_relaxed);
    if (connection_lost(att)) mark_lost(att);
    return;
  }
  if (g.refused.load(std::memory_order_relaxed) || now < g.next_attempt_ns.load(std::memory_order_relaxed))
    return;
  AttachLock lock(/*wait=*/false);
  if (!lock.held() || g.current.load(std::memory_order_acquire)) return;
  g.next_attempt_ns.store(now + int64_t{kReattachIntervalSeconds} * 1'000'000'000, std::memory_order_relaxed);
  if (register_now() == AttachStatus::kAttached) {
    if (EventCallback cb = g.callback.load(std::memory_order_acquire))
      cb(Event::kReattached, "registered with the scheduler again");
  }
}

void detach() noexcept {
  AttachLock lock(/*wait=*/true);
  g.current.store(nullptr, std::memory_order_release);
  // Closing the connection is the release: the daemon gives back the slot's memory and
  // the tenant's token if this was its last process.
  const int fd = g.fd.exchange(-1, std::memory_order_relaxed);
  if (fd >= 0) close(fd);
}

void after_fork_child() noexcept {
  // Only the forking thread exists now; a lock another thread held is meaningless.
  g.attaching.store(false, std::memory_order_relaxed);
  g.current.store(nullptr, std::memory_order_relaxed);
  const int fd = g.fd.exchange(-1, std::memory_order_relaxed);
  if (fd >= 0) close(fd);  // the child's copy only: the parent stays registered
  for (auto& c : g.local_charged) c.store(0, std::memory_order_relaxed);
  for (auto& p : g.parked) p.store(false, std::memory_order_relaxed);
  g.checkpoint_flags.store(0, std::memory_order_relaxed);  // the child holds none of it
  g.refused.store(false, std::memory_order_relaxed);
  g.next_attempt_ns.store(0, std::memory_order_relaxed);
}

void set_device(int gpu, uint64_t total_bytes, const unsigned char uuid[16]) noexcept {
  if (static_cast<unsigned>(gpu) >= kMaxGpus) return;
  g.device_memory[gpu].store(total_bytes, std::memory_order_relaxed);
  if (uuid != nullptr) {
    uint64_t words[2];
    memcpy(words, uuid, sizeof words);
    g.device_uuid[gpu][0].store(words[0], std::memory_order_relaxed);
    g.device_uuid[gpu][1].store(words[1], std::memory_order_relaxed);
  }
  if (const Attachment* att = g.current.load(std::memory_order_acquire)) publish_devices(att);
}

}  // namespace cuslice::client
