// A hostile local process for the attack tests (test_segment_attacks.py): it tries what an
// unprivileged user whose processes belong to one tenant could try against the scheduler's
// shared memory, and says for each attempt whether it was refused. It speaks the
// registration protocol itself, as an attacker would, without the client library.
//
//   segment_attacker SOCKET SHM_NAME TENANT ATTACK...
//
//   segment       open the segment for writing; map it writable; make a read-only mapping
//                 writable; write to it, resize it, change its mode, remove it
//   resize        shrink and grow its own tenant region (ftruncate, fallocate, a write past
//                 the end), add a seal
//   poison        write out-of-range values over the whole of its own tenant region (every
//                 counter, every process record, the header), rewriting them and kicking
//                 the daemon for a second
//   steal=NAME    get tenant NAME's region: register as NAME; read the descriptors of the
//                 daemon and of NAME's registered processes through /proc
//
// It registers as TENANT first ("registered tenant T slot S" on stdout). Then one line per
// attempt: "refused WHAT" or "ALLOWED WHAT". Then "done", and it stays registered (its
// poisoned region live) until its stdin closes. Exit status: 0 when every attempt was
// refused, 1 when one was allowed, 2 on a usage or set-up error (the reason on stderr).
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "protocol/shm_protocol.h"
#include "protocol/socket_protocol.h"

namespace {

namespace shm = cuslice::shm;
namespace wire = cuslice::wire;

bool g_allowed = false;

// `refused`: the attempt failed, as it must.
void verdict(bool refused, const std::string& what) {
  std::printf("%s %s\n", refused ? "refused" : "ALLOWED", what.c_str());
  std::fflush(stdout);
  g_allowed |= !refused;
}

[[noreturn]] void setup_error(const std::string& what) {
  std::fprintf(stderr, "segment_attacker: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(2);
}

struct Registration {
  int sock = -1;
  wire::RegisterReply reply;
  int region_fd = -1;   // -1: the reply brought none
  int segment_fd = -1;  // the segment, as the reply brings it after the region
};

Registration register_as(const char* socket_path, const std::string& tenant) {
  Registration r;
  r.sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path, sizeof addr.sun_path - 1);
  if (r.sock < 0 || connect(r.sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) setup_error("connect");
  wire::RegisterRequest req;
  std::strncpy(req.tenant, tenant.c_str(), sizeof req.tenant - 1);
  if (send(r.sock, &req, sizeof req, MSG_NOSIGNAL) != sizeof req) setup_error("send");
  iovec iov{&r.reply, sizeof r.reply};
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  if (recvmsg(r.sock, &msg, MSG_CMSG_CLOEXEC) != sizeof r.reply) setup_error("recvmsg");
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    if (count >= 1) std::memcpy(&r.region_fd, CMSG_DATA(c), sizeof(int));
    if (count >= 2) std::memcpy(&r.segment_fd, CMSG_DATA(c) + sizeof(int), sizeof(int));
  }
  return r;
}

// The segment's descriptor the daemon handed over with the reply: read-only, whatever is
// tried through it.
void attack_segment_fd(int fd) {
  if (fd < 0) setup_error("the reply brought no segment descriptor");
  verdict(mmap(nullptr, sizeof(shm::Segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED,
          "mapping the handed segment writable");
  const uint64_t huge = shm::kUnlimited;
  verdict(pwrite(fd, &huge, sizeof huge, offsetof(shm::Segment, tenants)) < 0, "writing the handed segment");
  verdict(fchmod(fd, 0666) != 0, "making the handed segment writable for all");
  verdict(open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDWR) < 0,
          "reopening the handed segment read-write");
}

void attack_segment(const std::string& name) {
  const std::string path = "/dev/shm" + name;
  verdict(shm_open(name.c_str(), O_RDWR, 0) < 0, "opening the segment read-write");
  verdict(shm_open(name.c_str(), O_WRONLY | O_TRUNC, 0) < 0, "opening the segment to truncate it");
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) setup_error("open the segment read-only");
  verdict(mmap(nullptr, sizeof(shm::Segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED,
          "mapping the segment writable");
  void* ro = mmap(nullptr, sizeof(shm::Segment), PROT_READ, MAP_SHARED, fd, 0);
  if (ro == MAP_FAILED) setup_error("map the segment read-only");
  verdict(mprotect(ro, sizeof(shm::Segment), PROT_READ | PROT_WRITE) != 0, "making a read-only mapping writable");
  // A private writable mapping is allowed, and changes nothing anyone else sees: the test
  // checks the segment afterwards.
  void* priv = mmap(nullptr, sizeof(shm::Segment), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  if (priv != MAP_FAILED) {
    auto* seg = static_cast<shm::Segment*>(priv);
    for (shm::Tenant& t : seg->tenants) {
      t.memory_quota.store(shm::kUnlimited);
      t.priority.store(2);
    }
    munmap(priv, sizeof(shm::Segment));
  }
  const uint64_t huge = shm::kUnlimited;
  verdict(pwrite(fd, &huge, sizeof huge, offsetof(shm::Segment, tenants)) < 0, "writing a quota with pwrite");
  verdict(ftruncate(fd, 0) != 0, "truncating the segment");
  verdict(fchmod(fd, 0666) != 0, "making the segment writable for all");
  verdict(unlink(path.c_str()) != 0, "removing the segment");
  munmap(ro, sizeof(shm::Segment));
  close(fd);
}

void attack_resize(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) setup_error("fstat the region");
  verdict(ftruncate(fd, 0) != 0, "shrinking the tenant region to 0");
  verdict(ftruncate(fd, st.st_size / 2) != 0, "shrinking the tenant region by half");
  verdict(ftruncate(fd, st.st_size * 2) != 0, "growing the tenant region");
  verdict(fallocate(fd, 0, st.st_size, 4096) != 0, "growing the tenant region with fallocate");
  const char byte = 1;
  verdict(pwrite(fd, &byte, 1, st.st_size) != 1, "writing past the end of the tenant region");
  verdict(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) != 0, "sealing the tenant region against the daemon's writes");
  verdict(fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) != 0, "sealing the tenant region against new mappings");
  struct stat after {};
  verdict(fstat(fd, &after) == 0 && after.st_size == st.st_size, "changing the tenant region's size at all");
}

void poison(shm::TenantRegion& r) {
  constexpr uint64_t kHuge = UINT64_MAX;
  r.magic = 0;
  r.tenant = 0xFFFFFFFF;
  r.total_size = 1;
  for (shm::TenantGpuUse& g : r.gpu) {
    g.memory_used.store(kHuge);
    g.gpu_time_ns.store(kHuge);
    g.wait_ns.store(kHuge);
    g.oom_refusals.store(kHuge);
    g.memory_total.store(1);
    g.uuid[0].store(kHuge);
    g.uuid[1].store(kHuge);
  }
  for (shm::ProcessUse& p : r.processes) {
    for (auto& c : p.charged) c.store(kHuge);
    for (auto& f : p.gpu_flags) f.store(0xFFFFFFFF);
  }
}

void attack_poison(int fd, int sock) {
  void* p = mmap(nullptr, sizeof(shm::TenantRegion), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) setup_error("map the tenant region");
  auto& region = *static_cast<shm::TenantRegion*>(p);
  // A second thread flips the memory counter as fast as it can while the daemon steps.
  std::atomic<bool> stop{false};
  std::thread flipper([&] {
    uint64_t v = 0;
    while (!stop.load(std::memory_order_relaxed)) region.gpu[0].memory_used.store(v++ & 1 ? UINT64_MAX : 0);
  });
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (std::chrono::steady_clock::now() < end) {
    poison(region);
    send(sock, "k", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  stop = true;
  flipper.join();
  poison(region);
  send(sock, "k", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  std::printf("poisoned\n");
  std::fflush(stdout);
}

// Whether anything under /proc/PID/{fd,map_files} can be opened.
void attack_proc(pid_t pid, const std::string& whose) {
  for (const char* dir : {"fd", "map_files"}) {
    const std::string path = "/proc/" + std::to_string(pid) + "/" + dir;
    DIR* d = opendir(path.c_str());
    verdict(d == nullptr, "listing " + whose + "'s /proc/" + dir);
    if (d != nullptr) closedir(d);
  }
  bool opened = false;
  for (int n = 0; n < 256 && !opened; ++n) {
    const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(n);
    const int fd = open(path.c_str(), O_RDWR);
    if (fd >= 0) {
      opened = true;
      close(fd);
    }
  }
  verdict(!opened, "opening " + whose + "'s descriptors through /proc");
}

void attack_steal(const char* socket_path, const std::string& shm_name, const std::string& victim) {
  const Registration r = register_as(socket_path, victim);
  verdict(r.reply.status != wire::RegisterStatus::kOk && r.region_fd < 0, "registering as tenant " + victim);
  if (r.region_fd >= 0) close(r.region_fd);
  close(r.sock);
  // Who is who, from the segment (readable by all).
  const int fd = shm_open(shm_name.c_str(), O_RDONLY, 0);
  void* p = fd >= 0 ? mmap(nullptr, sizeof(shm::Segment), PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (p == MAP_FAILED) setup_error("map the segment");
  close(fd);
  const auto& seg = *static_cast<const shm::Segment*>(p);
  attack_proc(seg.daemon_pid, "the daemon");
  for (const shm::ProcessSlot& slot : seg.processes) {
    const uint32_t t = slot.tenant.load();
    if (slot.state.load() != shm::ProcessSlot::kActive || t >= shm::kMaxTenants || victim != seg.tenants[t].name)
      continue;
    attack_proc(slot.pid.load(), "a process of " + victim);
  }
  munmap(p, sizeof(shm::Segment));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: segment_attacker SOCKET SHM_NAME TENANT ATTACK...\n");
    return 2;
  }
  const char* socket_path = argv[1];
  const std::string shm_name = argv[2];
  const Registration me = register_as(socket_path, argv[3]);
  if (me.reply.status != wire::RegisterStatus::kOk || me.region_fd < 0) {
    std::fprintf(stderr, "segment_attacker: not registered: %s\n", me.reply.message);
    return 2;
  }
  std::printf("registered tenant %u slot %u\n", me.reply.tenant, me.reply.slot);
  for (int i = 4; i < argc; ++i) {
    const std::string attack = argv[i];
    if (attack == "segment") {
      attack_segment(shm_name);
      attack_segment_fd(me.segment_fd);
    }
    else if (attack == "resize") attack_resize(me.region_fd);
    else if (attack == "poison") attack_poison(me.region_fd, me.sock);
    else if (attack.rfind("steal=", 0) == 0) attack_steal(socket_path, shm_name, attack.substr(6));
    else {
      std::fprintf(stderr, "segment_attacker: unknown attack %s\n", attack.c_str());
      return 2;
    }
  }
  std::printf("done\n");
  std::fflush(stdout);
  char buf[64];
  while (read(STDIN_FILENO, buf, sizeof buf) > 0) {
  }
  return g_allowed ? 1 : 0;
}
