#include "client.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>

#include "futex.h"
#include "shm_protocol.h"
#include "socket_protocol.h"

namespace cuslice::client {
namespace {

using shm::kMaxGpus;

constexpr int kReplyTimeoutMs = 500;
constexpr int64_t kWaitSliceNs = 100'000'000;   // a waiter re-checks the daemon this often
constexpr int64_t kHealthCheckNs = 100'000'000;  // maintain() polls the socket at most this often

// What one registration produced. Immutable once published through State::current and
// never freed: a thread may still read it (and the segment it points to) after the client
// has moved on to a newer daemon. Each lives in its own anonymous page, so that creating it
// does not call malloc; one page and one segment mapping leak per daemon restart.
struct Attachment {
  shm::Segment* segment;
  uint32_t slot;
  uint32_t tenant;
};

struct State {
  std::atomic<Attachment*> current{nullptr};  // nullptr: detached, everything ungated
  // The connection's descriptor. Its number stays the same across re-attaches (the new
  // socket is dup3()ed onto it), so a thread that read it just before a re-attach sends
  // its kick to a live connection rather than to a descriptor the application reused.
  std::atomic<int> fd{-1};
  std::atomic<uint64_t> local_charged[kMaxGpus] = {};  // this process's bytes, attached or not
  std::atomic<uint64_t> device_memory[kMaxGpus] = {};
  std::atomic<uint64_t> device_uuid[kMaxGpus][2] = {};  // CUuuid bytes 0-7, 8-15 (0: unknown)
  std::atomic<bool> refused{false};
  // Per GPU: token_try published a demand on the current attachment (one waiter counted in
  // the slot's flags) that token_unpark has not withdrawn.
  std::atomic<bool> parked[kMaxGpus] = {};
  std::atomic<int64_t> next_attempt_ns{0};
  std::atomic<int64_t> next_check_ns{0};
  std::atomic<bool> attaching{false};  // serialises attach, re-attach and detach
  std::atomic<EventCallback> callback{nullptr};
  char error[320] = {};
};
constinit State g;

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: no system call
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

void set_error(const char* what, const char* detail) {
  snprintf(g.error, sizeof g.error, "%s%s%s", what, detail[0] ? ": " : "", detail);
}

// Subtracts up to `amount` without going below zero; returns what was subtracted.
uint64_t saturating_sub(std::atomic<uint64_t>& counter, uint64_t amount) {
  uint64_t cur = counter.load(std::memory_order_relaxed);
  uint64_t take;
  do {
    take = cur < amount ? cur : amount;
  } while (!counter.compare_exchange_weak(cur, cur - take, std::memory_order_acq_rel,
                                          std::memory_order_relaxed));
  return take;
}

void kick() {
  const int fd = g.fd.load(std::memory_order_relaxed);
  if (fd >= 0) send(fd, "k", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

// The daemon stopped (cleanly: segment state) or died (the socket reports EOF or an error;
// the daemon never sends after the reply, so anything readable means the end).
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

// Maps the segment the reply names and checks it is the one the daemon registered us in.
shm::Segment* map_segment(const wire::RegisterReply& reply) {
  char name[shm::kNameSize];
  memcpy(name, reply.shm_name, sizeof name);
  name[sizeof name - 1] = '\0';
  const int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    set_error("cannot open the scheduler's shared memory", strerror(errno));
    return nullptr;
  }
  struct stat st;
  void* p = MAP_FAILED;
  if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= sizeof(shm::Segment))
    p = mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    set_error("cannot map the scheduler's shared memory", "too small or not mappable");
    return nullptr;
  }
  auto* seg = static_cast<shm::Segment*>(p);
  if (!shm::compatible(*seg, st.st_size) || seg->generation != reply.segment_generation ||
      reply.slot >= shm::kMaxProcesses || reply.tenant >= shm::kMaxTenants ||
      seg->processes[reply.slot].generation.load(std::memory_order_acquire) != reply.slot_generation) {
    munmap(p, st.st_size);
    set_error("the scheduler's shared memory is not the one it registered us in", "");
    return nullptr;
  }
  return seg;
}

// What the hook learnt of the cards (segment minor 1): every hook writes the same values.
void publish_devices(const Attachment* att) {
  for (uint32_t i = 0; i < kMaxGpus; ++i) {
    shm::GpuState& gs = att->segment->gpus[i];
    if (const uint64_t total = g.device_memory[i].load(std::memory_order_relaxed))
      gs.memory_total.store(total, std::memory_order_relaxed);
    const uint64_t lo = g.device_uuid[i][0].load(std::memory_order_relaxed);
    const uint64_t hi = g.device_uuid[i][1].load(std::memory_order_relaxed);
    if (lo != 0 || hi != 0) {
      gs.uuid[0].store(lo, std::memory_order_relaxed);
      gs.uuid[1].store(hi, std::memory_order_relaxed);
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

// One registration attempt; the caller holds g.attaching.
AttachStatus register_now() {
  const char* path = getenv(wire::kSocketEnv);
  if (path == nullptr || path[0] == '\0') path = wire::kDefaultSocketPath;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof addr.sun_path) {
    set_error("socket path too long", path);
    return AttachStatus::kFailed;
  }
  strcpy(addr.sun_path, path);

  const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) {
    set_error("socket", strerror(errno));
    return AttachStatus::kFailed;
  }
  // A Unix-socket connect completes or fails at once; EAGAIN (backlog full) counts as absent.
  if (connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    set_error("no scheduler listening", strerror(errno));
    close(s);
    return AttachStatus::kNoDaemon;
  }
  wire::RegisterRequest req;
  if (const char* tenant = getenv(wire::kTenantEnv)) strncpy(req.tenant, tenant, sizeof req.tenant - 1);
  for (uint32_t i = 0; i < kMaxGpus; ++i) req.charged[i] = g.local_charged[i].load(std::memory_order_relaxed);

  wire::RegisterReply reply;
  pollfd p{s, POLLIN, 0};
  if (send(s, &req, sizeof req, MSG_NOSIGNAL) != sizeof req) {
    set_error("cannot send the registration", strerror(errno));
    close(s);
    return AttachStatus::kNoDaemon;
  }
  if (poll(&p, 1, kReplyTimeoutMs) != 1 || recv(s, &reply, sizeof reply, 0) != sizeof reply ||
      reply.magic != wire::kMagic || reply.version != wire::kVersion) {
    set_error("no valid reply from the scheduler", "");
    close(s);
    return AttachStatus::kFailed;
  }
  reply.message[sizeof reply.message - 1] = '\0';
  if (reply.status != wire::RegisterStatus::kOk) {
    set_error("the scheduler refused this process", reply.message);
    close(s);
    if (reply.status != wire::RegisterStatus::kRefused) return AttachStatus::kFailed;
    g.refused.store(true, std::memory_order_relaxed);
    return AttachStatus::kRefused;
  }
  shm::Segment* seg = map_segment(reply);
  void* page = seg ? mmap(nullptr, sizeof(Attachment), PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                   : MAP_FAILED;
  if (page == MAP_FAILED) {
    if (seg) set_error("cannot allocate the attachment", strerror(errno));
    close(s);
    return AttachStatus::kFailed;
  }
  auto* att = new (page) Attachment{seg, reply.slot, reply.tenant};
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
  g.current.store(att, std::memory_order_release);
  publish_devices(att);
  send_workload(g.fd.load(std::memory_order_relaxed));
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
  const AttachStatus status = register_now();
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

void note_oom_refusal(int gpu) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr || static_cast<unsigned>(gpu) >= kMaxGpus) return;
  att->segment->tenants[att->tenant].gpu[gpu].oom_refusals.fetch_add(1, std::memory_order_relaxed);
}

namespace {

// The tenant's quota in bytes on `gpu` (a percentage resolved against the card's size).
uint64_t quota_of(const shm::Tenant& tenant, int gpu) {
  uint64_t limit = tenant.memory_quota.load(std::memory_order_relaxed);
  if (const uint32_t ppm = tenant.memory_quota_ppm.load(std::memory_order_relaxed)) {
    const uint64_t card = g.device_memory[gpu].load(std::memory_order_relaxed);
    limit = card ? static_cast<uint64_t>(static_cast<unsigned __int128>(card) * ppm / 1'000'000)
                 : shm::kUnlimited;  // card unknown: count, and let the local limit decide
  }
  return limit;
}

}  // namespace

Reserve memory_try_reserve(int gpu, uint64_t bytes) noexcept {
  if (static_cast<unsigned>(gpu) >= kMaxGpus) return Reserve::kUngated;
  g.local_charged[gpu].fetch_add(bytes, std::memory_order_relaxed);
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return Reserve::kUngated;
  shm::Tenant& tenant = att->segment->tenants[att->tenant];
  const uint64_t limit = quota_of(tenant, gpu);
  std::atomic<uint64_t>& used = tenant.gpu[gpu].memory_used;
  uint64_t cur = used.load(std::memory_order_relaxed);
  do {
    if (bytes > limit || cur > limit - bytes) {
      saturating_sub(g.local_charged[gpu], bytes);
      return Reserve::kOverQuota;
    }
  } while (!used.compare_exchange_weak(cur, cur + bytes, std::memory_order_acq_rel,
                                       std::memory_order_relaxed));
  // After the tenant counter (see ProcessSlot::charged for why this order).
  att->segment->processes[att->slot].charged[gpu].fetch_add(bytes, std::memory_order_release);
  return Reserve::kOk;
}

void memory_release(int gpu, uint64_t bytes) noexcept {
  if (static_cast<unsigned>(gpu) >= kMaxGpus) return;
  saturating_sub(g.local_charged[gpu], bytes);
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return;
  // Slot first, then tenant: a kill in between leaks, it never over-returns. Bytes reserved
  // while detached were never charged to this slot; the saturation drops them.
  const uint64_t taken = saturating_sub(att->segment->processes[att->slot].charged[gpu], bytes);
  saturating_sub(att->segment->tenants[att->tenant].gpu[gpu].memory_used, taken);
}

void memory_charge(int gpu, uint64_t bytes) noexcept {
  if (static_cast<unsigned>(gpu) >= kMaxGpus) return;
  g.local_charged[gpu].fetch_add(bytes, std::memory_order_relaxed);
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return;
  att->segment->tenants[att->tenant].gpu[gpu].memory_used.fetch_add(bytes, std::memory_order_acq_rel);
  att->segment->processes[att->slot].charged[gpu].fetch_add(bytes, std::memory_order_release);
}

uint64_t tenant_memory_quota(int gpu) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr || static_cast<unsigned>(gpu) >= kMaxGpus) return shm::kUnlimited;
  return quota_of(att->segment->tenants[att->tenant], gpu);
}

uint64_t tenant_memory_used(int gpu) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr || static_cast<unsigned>(gpu) >= kMaxGpus) return 0;
  return att->segment->tenants[att->tenant].gpu[gpu].memory_used.load(std::memory_order_relaxed);
}

namespace {

// Takes the token from a holder (or a draining tenant) the tenant outranks, without asking
// the daemon (shm_protocol.h, GpuState::holder): a high-priority tenant starts at the next
// kernel boundary instead of after a round trip through the daemon. True when it holds it.
bool try_preempt(const Attachment* att, int gpu) {
  shm::Segment& seg = *att->segment;
  if (seg.abi_minor < 2) return false;  // the daemon does not publish who may
  shm::GpuState& gs = seg.gpus[gpu];
  const shm::Tenant& me = seg.tenants[att->tenant];
  const uint32_t mine = me.priority.load(std::memory_order_relaxed);
  if (mine < gs.preempt_priority.load(std::memory_order_acquire) ||
      (me.gpu[gpu].flags.load(std::memory_order_relaxed) & shm::TenantGpu::kCapped))
    return false;
  uint32_t cur = gs.holder.load(std::memory_order_acquire);
  if (cur == att->tenant) return true;
  // The published floor may be older than the holder: compare with the holder itself.
  if (cur != shm::kNoTenant &&
      (cur >= shm::kMaxTenants || seg.tenants[cur].priority.load(std::memory_order_relaxed) >= mine))
    return false;
  if (!gs.holder.compare_exchange_strong(cur, att->tenant, std::memory_order_acq_rel)) return false;
  gs.preempt_priority.store(mine + 1, std::memory_order_release);
  gs.grant_seq.fetch_add(1, std::memory_order_release);
  futex_wake_all(&gs.grant_seq);  // the tenant's other waiting threads and processes
  kick();                         // the daemon adopts it at its next step
  return true;
}

}  // namespace

void token_acquire(int gpu) noexcept {
  if (static_cast<unsigned>(gpu) >= kMaxGpus) return;
  Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return;
  shm::GpuState& gs = att->segment->gpus[gpu];
  std::atomic<uint32_t>& flags = att->segment->processes[att->slot].gpu_flags[gpu];
  if (gs.holder.load(std::memory_order_acquire) == att->tenant) {
    if (!(flags.load(std::memory_order_relaxed) & shm::ProcessSlot::kBusy))
      flags.fetch_or(shm::ProcessSlot::kBusy, std::memory_order_relaxed);
    return;
  }
  // Outranking the holder: take the token, no waiting.
  if (try_preempt(att, gpu)) {
    flags.fetch_or(shm::ProcessSlot::kBusy, std::memory_order_seq_cst);
    return;
  }
  // Slow path: publish the demand (slot flags first, so the daemon sees it when the kick
  // arrives), then sleep on the grant sequence.
  // kBusy is not set here: it means work queued on the GPU, which only a holder can have
  // added; the daemon waits for a revoked holder's busy processes to drain, and a waiting
  // thread must not make a process with kernels still running look drained or busy.
  flags.fetch_add(1, std::memory_order_seq_cst);
  gs.waiting_tenants.fetch_or(uint64_t{1} << att->tenant, std::memory_order_seq_cst);
  kick();
  // Time waited goes to the tenant as it passes, so a long wait shows while it lasts.
  std::atomic<uint64_t>& waited = att->segment->tenants[att->tenant].gpu[gpu].wait_ns;
  int64_t since = now_ns();
  for (;;) {
    const uint32_t seq = gs.grant_seq.load(std::memory_order_acquire);
    if (gs.holder.load(std::memory_order_acquire) == att->tenant) break;
    if (g.current.load(std::memory_order_acquire) != att) break;  // detached meanwhile
    if (try_preempt(att, gpu)) break;  // the holder changed to one this tenant outranks
    if (connection_lost(att)) {
      mark_lost(att);
      break;
    }
    futex_wait(&gs.grant_seq, seq, kWaitSliceNs);
    // Still waiting after a slice: make sure the demand is published (an older daemon could
    // drop the bit) and tell the daemon again.
    if (!(gs.waiting_tenants.load(std::memory_order_seq_cst) & (uint64_t{1} << att->tenant))) {
      gs.waiting_tenants.fetch_or(uint64_t{1} << att->tenant, std::memory_order_seq_cst);
      kick();
    }
    const int64_t now = now_ns();
    waited.fetch_add(static_cast<uint64_t>(now - since), std::memory_order_relaxed);
    since = now;
  }
  waited.fetch_add(static_cast<uint64_t>(now_ns() - since), std::memory_order_relaxed);
  flags.fetch_or(shm::ProcessSlot::kBusy, std::memory_order_seq_cst);  // about to launch
  flags.fetch_sub(1, std::memory_order_seq_cst);
}

bool token_try(int gpu) noexcept {
  if (static_cast<unsigned>(gpu) >= kMaxGpus) return true;
  Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return true;
  shm::GpuState& gs = att->segment->gpus[gpu];
  std::atomic<uint32_t>& flags = att->segment->processes[att->slot].gpu_flags[gpu];
  if (gs.holder.load(std::memory_order_acquire) == att->tenant || try_preempt(att, gpu)) {
    if (!(flags.load(std::memory_order_relaxed) & shm::ProcessSlot::kBusy))
      flags.fetch_or(shm::ProcessSlot::kBusy, std::memory_order_seq_cst);
    return true;
  }
  // As token_acquire's slow path publishes a waiting thread: the slot's count first, then the
  // tenant's bit, then the kick. Afterwards only the bit is re-checked (the daemon may drop it
  // between its scan and its clear: restore_waiting), which is one load.
  const uint64_t bit = uint64_t{1} << att->tenant;
  if (!g.parked[gpu].exchange(true, std::memory_order_acq_rel)) {
    flags.fetch_add(1, std::memory_order_seq_cst);
  } else if (gs.waiting_tenants.load(std::memory_order_relaxed) & bit) {
    return false;
  }
  gs.waiting_tenants.fetch_or(bit, std::memory_order_seq_cst);
  kick();
  return false;
}

void token_unpark(int gpu) noexcept {
  if (static_cast<unsigned>(gpu) >= kMaxGpus || !g.parked[gpu].load(std::memory_order_relaxed)) return;
  if (!g.parked[gpu].exchange(false, std::memory_order_acq_rel)) return;
  if (const Attachment* att = g.current.load(std::memory_order_acquire))
    att->segment->processes[att->slot].gpu_flags[gpu].fetch_sub(1, std::memory_order_seq_cst);
}

bool lower_priority_waiting(int gpu) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr || static_cast<unsigned>(gpu) >= kMaxGpus) return false;
  const uint32_t mine = att->segment->tenants[att->tenant].priority.load(std::memory_order_relaxed);
  uint64_t waiting = att->segment->gpus[gpu].waiting_tenants.load(std::memory_order_acquire) &
                     ~(uint64_t{1} << att->tenant);
  for (; waiting != 0; waiting &= waiting - 1) {
    const unsigned t = static_cast<unsigned>(__builtin_ctzll(waiting));
    if (att->segment->tenants[t].priority.load(std::memory_order_relaxed) < mine) return true;
  }
  return false;
}

Neighbours neighbours() noexcept {
  Neighbours n;
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return n;
  const uint32_t mine = att->segment->tenants[att->tenant].priority.load(std::memory_order_relaxed);
  for (const shm::ProcessSlot& p : att->segment->processes) {
    if (p.state.load(std::memory_order_relaxed) != shm::ProcessSlot::kActive) continue;
    const uint32_t t = p.tenant.load(std::memory_order_relaxed);
    if (t == att->tenant || t >= shm::kMaxTenants) continue;
    n.others = true;
    if (att->segment->tenants[t].priority.load(std::memory_order_relaxed) > mine) n.higher = true;
  }
  return n;
}

bool tenant_pid(int pid) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return false;
  for (const shm::ProcessSlot& p : att->segment->processes)
    if (p.state.load(std::memory_order_relaxed) == shm::ProcessSlot::kActive &&
        p.pid.load(std::memory_order_relaxed) == pid && p.tenant.load(std::memory_order_relaxed) == att->tenant)
      return true;
  return false;
}

bool holding(int gpu) noexcept {
  const Attachment* att = g.current.load(std::memory_order_acquire);
  return att != nullptr && static_cast<unsigned>(gpu) < kMaxGpus &&
         att->segment->gpus[gpu].holder.load(std::memory_order_acquire) == att->tenant;
}

void token_release(int gpu) noexcept {
  if (static_cast<unsigned>(gpu) >= kMaxGpus) return;
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return;
  shm::GpuState& gs = att->segment->gpus[gpu];
  att->segment->processes[att->slot].gpu_flags[gpu].fetch_and(~shm::ProcessSlot::kBusy,
                                                              std::memory_order_seq_cst);
  // Others wait: tell the daemon now, whether this tenant still holds the token (early
  // hand-off) or it was revoked and the daemon waits for its queued work to drain (else it
  // would learn it only at its next drain poll).
  const uint64_t others = gs.waiting_tenants.load(std::memory_order_seq_cst) & ~(uint64_t{1} << att->tenant);
  if (others != 0) kick();
}

void report_gpu_time(int gpu, uint64_t ns) noexcept {
  if (static_cast<unsigned>(gpu) >= kMaxGpus) return;
  const Attachment* att = g.current.load(std::memory_order_acquire);
  if (att == nullptr) return;
  att->segment->tenants[att->tenant].gpu[gpu].gpu_time_ns.fetch_add(ns, std::memory_order_relaxed);
}

}  // namespace cuslice::client
