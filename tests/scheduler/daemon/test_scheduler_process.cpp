// The daemon and real client processes: each test starts cuslice-scheduler on a private
// socket and segment, forks processes that use the client library the way the hook does
// (a "kernel" is a 2 ms busy loop run while holding the token), and reads the outcome from
// the shared segment. Tolerances are wide: these run on loaded CI machines.
#include <fcntl.h>
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "hook/link/client.h"
#include "protocol/shm_protocol.h"
#include "protocol/socket_protocol.h"
#include "tests/kit/scoped_scheduler.h"

namespace cuslice {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace client = cuslice::client;

void spin_for(std::chrono::nanoseconds d) {
  const auto end = Clock::now() + d;
  while (Clock::now() < end) {
  }
}

// One simulated kernel on GPU 0.
void run_kernel() {
  client::token_acquire(0);
  spin_for(2ms);
  client::report_gpu_time(0, 2'000'000);
}

class SchedulerProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scheduler_.dir();
    socket_ = scheduler_.socket();
    config_ = scheduler_.config_path();
    shm_name_ = scheduler_.shm_name();
  }

  void TearDown() override {
    for (pid_t pid : children_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    stop_daemon(SIGTERM);  // a clean stop also removes the segment from /dev/shm
    if (segment_) munmap(segment_, sizeof(shm::Segment));
  }

  void write_config(const std::string& yaml) { scheduler_.write_config(yaml); }

  // Starts the daemon and waits until it accepts registrations; maps its segment.
  void start_daemon() {
    ASSERT_TRUE(scheduler_.start({"--log-level", "warn"}));
    const auto deadline = Clock::now() + 5s;
    if (segment_) munmap(segment_, sizeof(shm::Segment));
    segment_ = nullptr;
    while (segment_ == nullptr) {
      ASSERT_LT(Clock::now(), deadline) << "the daemon did not publish its segment";
      const int fd = shm_open(shm_name_.c_str(), O_RDONLY, 0);
      void* p = fd >= 0 ? mmap(nullptr, sizeof(shm::Segment), PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
      if (fd >= 0) close(fd);
      if (p != MAP_FAILED && shm::compatible(*static_cast<shm::Segment*>(p), sizeof(shm::Segment))) {
        segment_ = static_cast<shm::Segment*>(p);
      } else {
        if (p != MAP_FAILED) munmap(p, sizeof(shm::Segment));
        std::this_thread::sleep_for(10ms);
      }
    }
  }

  void stop_daemon(int signal) { scheduler_.stop(signal); }

  bool daemon_listening() const { return scheduler_.listening(); }

  // Forks a client process of `tenant` that runs `body` after attaching and exits with the
  // code `body` returns (attach failing is exit code 100).
  pid_t spawn(const std::string& tenant, std::function<int()> body) {
    const pid_t pid = fork();
    if (pid == 0) {
      client::after_fork_child();
      setenv("CUSLICE_SOCKET", socket_.c_str(), 1);
      setenv("CUSLICE_TENANT", tenant.c_str(), 1);
      if (client::attach() != client::AttachStatus::kAttached) _exit(100);
      _exit(body());
    }
    children_.push_back(pid);
    return pid;
  }

  int wait_exit(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    std::erase(children_, pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  // Once `tenant`'s child `c` ran on the GPU: kills the daemon, starts another, and expects
  // the child registered there again (the `bytes` it holds and its GPU time seen by the new
  // daemon) and to exit 0.
  void restart_and_expect_back(const std::string& tenant, uint64_t bytes, pid_t c) {
    ASSERT_TRUE(eventually([&] { return gpu_time(tenant) > 0; }, 2000ms));
    stop_daemon(SIGKILL);
    std::this_thread::sleep_for(500ms);
    start_daemon();
    // The new daemon learns the process's memory from its re-registration.
    EXPECT_TRUE(eventually([&] { return segment_->tenants[tenant_index(tenant)].gpu[0].memory_used.load() == bytes; },
                           3000ms));
    EXPECT_TRUE(eventually([&] { return gpu_time(tenant) > 0; }, 3000ms));
    EXPECT_EQ(wait_exit(c), 0);
  }

  uint32_t tenant_index(const std::string& name) const {
    for (uint32_t t = 0; t < shm::kMaxTenants; ++t)
      if (segment_->tenants[t].state.load() == shm::Tenant::kActive && name == segment_->tenants[t].name) return t;
    ADD_FAILURE() << "no tenant " << name;
    return 0;
  }

  uint64_t gpu_time(const std::string& name) const {
    return segment_->tenants[tenant_index(name)].gpu[0].gpu_time_ns.load();
  }

  // Polls `condition` for up to `limit`.
  static bool eventually(std::function<bool()> condition, std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    while (!condition()) {
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }

  static std::function<int()> kernels_for(std::chrono::milliseconds duration) {
    return [duration] {
      const auto end = Clock::now() + duration;
      while (Clock::now() < end) run_kernel();
      return 0;
    };
  }

  test_kit::ScopedScheduler scheduler_{"cuslice-sched"};
  std::string dir_, socket_, config_, shm_name_;
  std::vector<pid_t> children_;
  shm::Segment* segment_ = nullptr;
};

TEST_F(SchedulerProcessTest, SharesSplitGpuTime) {
  write_config(
      "scheduler: {quantum: 10ms}\n"
      "tenants:\n"
      "  - {name: a, allow_env: true, compute: {share: 70%}}\n"
      "  - {name: b, allow_env: true, compute: {share: 30%}}\n");
  start_daemon();
  const pid_t a = spawn("a", kernels_for(2500ms));
  const pid_t b = spawn("b", kernels_for(2500ms));
  EXPECT_EQ(wait_exit(a), 0);
  EXPECT_EQ(wait_exit(b), 0);
  const double ta = static_cast<double>(gpu_time("a")), tb = static_cast<double>(gpu_time("b"));
  ASSERT_GT(ta + tb, 0);
  EXPECT_NEAR(ta / (ta + tb), 0.70, 0.08) << "a=" << ta << " b=" << tb;
}

TEST_F(SchedulerProcessTest, LimitCapsATenantThatIsAlone) {
  write_config(
      "scheduler: {quantum: 10ms, limit_window: 500ms}\n"
      "tenants:\n"
      "  - {name: a, allow_env: true, compute: {limit: 30%}}\n");
  start_daemon();
  const auto start = Clock::now();
  EXPECT_EQ(wait_exit(spawn("a", kernels_for(2500ms))), 0);
  const double wall = static_cast<double>(std::chrono::nanoseconds(Clock::now() - start).count());
  const double busy = static_cast<double>(gpu_time("a")) / wall;
  EXPECT_GT(busy, 0.10);
  EXPECT_LT(busy, 0.40);
}

TEST_F(SchedulerProcessTest, HigherPriorityTakesTheGpu) {
  write_config(
      "scheduler: {quantum: 10ms}\n"
      "tenants:\n"
      "  - {name: low, allow_env: true, priority: low}\n"
      "  - {name: high, allow_env: true, priority: high}\n");
  start_daemon();
  spawn("low", kernels_for(3000ms));
  ASSERT_TRUE(eventually([&] { return gpu_time("low") > 0; }, 2000ms));
  spawn("high", kernels_for(3000ms));
  ASSERT_TRUE(eventually([&] { return gpu_time("high") > 0; }, 2000ms));
  const uint64_t low0 = gpu_time("low"), high0 = gpu_time("high");
  std::this_thread::sleep_for(1000ms);
  const uint64_t low = gpu_time("low") - low0, high = gpu_time("high") - high0;
  EXPECT_GT(high, 0u);
  EXPECT_LT(static_cast<double>(low), 0.05 * static_cast<double>(low + high)) << "low=" << low << " high=" << high;
}

// A tenant that outranks the holder takes the token at the step its claim (its waiting
// count, then a kick) triggers: straight from the holder, whose queued work never drains, in
// one hand-over with no drain in between. An equal-priority tenant still waits for the
// policy.
TEST_F(SchedulerProcessTest, HigherPriorityTakesTheTokenWithoutADrain) {
  write_config(
      "scheduler: {quantum: 10ms}\n"
      "tenants:\n"
      "  - {name: low, allow_env: true, priority: low}\n"
      "  - {name: low2, allow_env: true, priority: low}\n"
      "  - {name: high, allow_env: true, priority: high}\n");
  start_daemon();
  const uint32_t low = tenant_index("low"), high = tenant_index("high");
  spawn("low", [] {
    client::token_acquire(0);  // holds it (busy) until killed
    pause();
    return 0;
  });
  ASSERT_TRUE(eventually([&] { return segment_->gpus[0].holder.load() == low; }, 2000ms));
  // Both register first, then wait for SIGUSR1 to ask for the token.
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  sigprocmask(SIG_BLOCK, &usr1, nullptr);  // inherited: the children take it with sigwait
  const auto after_go = [usr1](std::function<int()> body) {
    return [usr1, body] {
      int sig = 0;
      sigwait(&usr1, &sig);
      return body();
    };
  };
  const pid_t peer = spawn("low2", after_go([] {
                             client::token_acquire(0);
                             return 0;
                           }));
  // The taker says on a pipe whether it got the token in time, then keeps it until killed.
  int got[2];
  ASSERT_EQ(pipe(got), 0);
  const pid_t taker = spawn("high", after_go([out = got[1]] {
                              const auto start = Clock::now();
                              client::token_acquire(0);
                              const char verdict = Clock::now() - start < 1000ms ? '0' : '1';
                              if (write(out, &verdict, 1) != 1) return 2;
                              pause();
                              return 0;
                            }));
  close(got[1]);
  sigprocmask(SIG_UNBLOCK, &usr1, nullptr);
  ASSERT_TRUE(eventually(
      [&] {
        int active = 0;
        for (const shm::ProcessSlot& p : segment_->processes) active += p.state.load() == shm::ProcessSlot::kActive;
        return active == 3;
      },
      2000ms));
  const uint64_t grants = segment_->tenants[high].gpu[0].token_grants.load();
  const uint64_t handoffs = segment_->gpus[0].handoffs.load();
  kill(taker, SIGUSR1);
  char verdict = 0;
  EXPECT_EQ(read(got[0], &verdict, 1), 1);
  close(got[0]);
  EXPECT_EQ(verdict, '0') << "the high tenant waited";
  EXPECT_EQ(segment_->gpus[0].holder.load(), high);
  EXPECT_EQ(segment_->tenants[high].gpu[0].token_grants.load(), grants + 1);
  EXPECT_EQ(segment_->gpus[0].handoffs.load(), handoffs + 1)
      << "the token went through a drain (holder none) before it reached the high tenant";
  kill(peer, SIGUSR1);
  std::this_thread::sleep_for(100ms);
  int status = 0;
  EXPECT_EQ(waitpid(peer, &status, WNOHANG), 0) << "an equal-priority tenant took the token by outranking";
  // The high tenant gone, the token goes back to low (low2 waits for low's slice to end,
  // behind a holder that never reports GPU time).
  kill(taker, SIGKILL);
  wait_exit(taker);
  EXPECT_TRUE(eventually([&] { return segment_->gpus[0].holder.load() == low; }, 2000ms));
}

TEST_F(SchedulerProcessTest, IdleHolderGivesTheTokenUpEarly) {
  write_config(
      "scheduler: {quantum: 5s}\n"
      "tenants:\n"
      "  - {name: a, allow_env: true}\n"
      "  - {name: b, allow_env: true}\n");
  start_daemon();
  const uint32_t ta = tenant_index("a");
  spawn("a", [] {
    run_kernel();
    client::token_release(0);
    std::this_thread::sleep_for(3s);
    return 0;
  });
  ASSERT_TRUE(eventually([&] { return segment_->gpus[0].holder.load() == ta; }, 2000ms));
  // b must get the token long before a's 5 s slice would end.
  const pid_t b = spawn("b", [] {
    const auto start = Clock::now();
    client::token_acquire(0);
    return Clock::now() - start < 1500ms ? 0 : 1;
  });
  EXPECT_EQ(wait_exit(b), 0);
}

TEST_F(SchedulerProcessTest, KilledHolderGivesBackMemoryAndToken) {
  // A slice longer than the test: b must wait for a's slice, not for a's share of the time
  // held (a is charged the time it holds the token, so a short slice would end in b's favour).
  write_config(
      "scheduler:\n  quantum: 10s\n"
      "tenants:\n"
      "  - {name: a, allow_env: true, memory: 1GiB}\n"
      "  - {name: b, allow_env: true}\n");
  start_daemon();
  const uint32_t ta = tenant_index("a"), tb = tenant_index("b");
  const pid_t holder = spawn("a", [] {
    if (client::memory_try_reserve(0, 600 << 20) != client::Reserve::kOk) return 1;
    client::token_acquire(0);
    for (;;) spin_for(1ms);  // a kernel that never ends
  });
  ASSERT_TRUE(eventually([&] { return segment_->tenants[ta].gpu[0].memory_used.load() == (600u << 20) &&
                                      segment_->gpus[0].holder.load() == ta; },
                         2000ms));
  // The quota is the tenant's, across its processes.
  const pid_t second = spawn("a", [] {
    if (client::memory_try_reserve(0, 600 << 20) != client::Reserve::kOverQuota) return 1;
    if (client::memory_try_reserve(0, 300 << 20) != client::Reserve::kOk) return 2;
    client::memory_release(0, 300 << 20);
    return 0;
  });
  EXPECT_EQ(wait_exit(second), 0);
  spawn("b", []() -> int {
    client::token_acquire(0);
    for (;;) spin_for(1ms);
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(segment_->gpus[0].holder.load(), ta) << "b took the token from a busy holder too early";

  kill(holder, SIGKILL);
  const auto killed = Clock::now();
  EXPECT_TRUE(eventually([&] { return segment_->tenants[ta].gpu[0].memory_used.load() == 0; }, 1500ms));
  EXPECT_TRUE(eventually([&] { return segment_->gpus[0].holder.load() == tb; }, 1500ms));
  EXPECT_LT(Clock::now() - killed, 1500ms);
}

// `gpus` is enforced where memory is: a tenant's process may hold nothing on a GPU its
// configuration keeps it off, and its quota on its own.
TEST_F(SchedulerProcessTest, ATenantHoldsNoMemoryOnAGpuItIsNotGiven) {
  write_config("tenants:\n  - {name: a, memory: 1GiB, gpus: [1], allow_env: true}\n  - {name: b, memory: 1GiB, allow_env: true}\n");
  start_daemon();
  const pid_t a = spawn("a", [] {
    if (client::memory_try_reserve(0, 1 << 20) != client::Reserve::kOverQuota) return 1;
    if (client::tenant_memory_quota(0) != 0) return 2;
    if (client::memory_try_reserve(1, 600 << 20) != client::Reserve::kOk) return 3;
    if (client::memory_try_reserve(1, 600 << 20) != client::Reserve::kOverQuota) return 4;
    return 0;
  });
  EXPECT_EQ(wait_exit(a), 0);
  // A tenant given no GPUs may use every one.
  const pid_t b = spawn("b", [] {
    return client::memory_try_reserve(0, 100 << 20) == client::Reserve::kOk &&
                   client::memory_try_reserve(3, 100 << 20) == client::Reserve::kOk
               ? 0
               : 1;
  });
  EXPECT_EQ(wait_exit(b), 0);
}

TEST_F(SchedulerProcessTest, ClientsSurviveADaemonRestartAndReattach) {
  write_config("tenants:\n  - {name: a, allow_env: true, memory: 1GiB}\n");
  start_daemon();
  // Exit code: 0 all good, 1 lost no connection, 2 stalled while the daemon was away,
  // 3 not attached again at the end, 4 reservation not carried over.
  const pid_t c = spawn("a", [] {
    if (client::memory_try_reserve(0, 100 << 20) != client::Reserve::kOk) return 4;
    bool lost = false;
    int kernels_while_lost = 0;
    const auto end = Clock::now() + 4s;
    while (Clock::now() < end) {
      run_kernel();
      client::maintain();
      if (!client::attached()) {
        lost = true;
        ++kernels_while_lost;
      }
    }
    if (!lost) return 1;
    if (kernels_while_lost == 0) return 2;
    return client::attached() ? 0 : 3;
  });
  restart_and_expect_back("a", 100u << 20, c);
}

// A container is given the segment's file by a bind mount onto its own /dev/shm (the device
// plugin's mounts): a restarted scheduler makes a new file, and the name in the container
// still shows the old one. The hook must follow the new daemon all the same, through the
// socket it has, and stay gated.
TEST_F(SchedulerProcessTest, AProcessWhoseSegmentIsBindMountedReattachesAfterARestart) {
  // A private mount namespace with a /dev/shm of its own, where <name> is a bind mount of
  // the first daemon's segment (through a pin outside /dev/shm), as a container runtime
  // makes it.
  const auto pin_segment = [this] {
    const std::string path = "/dev/shm" + shm_name_, pin = dir_ + "/segment-pin";
    const auto file = [](const std::string& p) { return close(open(p.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644)) == 0; };
    return unshare(CLONE_NEWNS) == 0 && mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
           file(pin) && mount(path.c_str(), pin.c_str(), nullptr, MS_BIND, nullptr) == 0 &&
           mount("tmpfs", "/dev/shm", "tmpfs", 0, nullptr) == 0 && file(path) &&
           mount(pin.c_str(), path.c_str(), nullptr, MS_BIND, nullptr) == 0;
  };
  write_config("tenants:\n  - {name: a, allow_env: true, memory: 1GiB}\n");
  start_daemon();
  const pid_t probe = fork();
  if (probe == 0) _exit(pin_segment() ? 0 : 1);
  if (wait_exit(probe) != 0) GTEST_SKIP() << "no mount namespace here (needs CAP_SYS_ADMIN)";
  // Exit code: 0 attached again and gated; 5 no namespace; 6 still attached to the old one at the end.
  const pid_t c = spawn("a", [&] {
    if (!pin_segment()) return 5;
    if (client::memory_try_reserve(0, 100 << 20) != client::Reserve::kOk) return 4;
    const auto end = Clock::now() + 4s;
    while (Clock::now() < end) {
      run_kernel();
      client::maintain();
    }
    return client::attached() ? 0 : 6;
  });
  restart_and_expect_back("a", 100u << 20, c);
}

TEST_F(SchedulerProcessTest, CleanStopReleasesWaiters) {
  // a outranks b: b waits for as long as a has work, however long a holds the token.
  write_config("tenants:\n  - {name: a, allow_env: true, priority: high}\n  - {name: b, allow_env: true, priority: low}\n");
  start_daemon();
  spawn("a", []() -> int {
    client::token_acquire(0);
    for (;;) spin_for(1ms);
  });
  ASSERT_TRUE(eventually([&] { return segment_->gpus[0].holder.load() == tenant_index("a"); }, 2000ms));
  const pid_t b = spawn("b", [] {
    client::token_acquire(0);  // blocked until the daemon stops, then ungated
    return client::attached() ? 1 : 0;
  });
  std::this_thread::sleep_for(200ms);
  stop_daemon(SIGTERM);
  EXPECT_EQ(wait_exit(b), 0);
}

TEST_F(SchedulerProcessTest, RefusesProcessesWithoutATenantWithAReason) {
  write_config("tenants:\n  - {name: a, allow_env: false, match: {uid: 4000000000}}\n");
  start_daemon();
  for (const char* tenant : {"", "a", "nope"}) {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("CUSLICE_SOCKET", socket_.c_str(), 1);
      setenv("CUSLICE_TENANT", tenant, 1);
      const bool refused = client::attach() == client::AttachStatus::kRefused;
      const bool explained = std::strstr(client::last_error(), "refused") != nullptr &&
                             std::strlen(client::last_error()) > 40;
      const bool final_answer = client::attach() == client::AttachStatus::kRefused;
      _exit(refused && explained && final_answer ? 0 : 1);
    }
    children_.push_back(pid);
    EXPECT_EQ(wait_exit(pid), 0) << "CUSLICE_TENANT=" << tenant;
  }
}

// A scheduler that answers every registration "full", or never answers, has no room for
// the process: the client says so (kBusy, on which the hook fails CUDA's initialisation)
// after a short wait, and never lets the process run unscheduled on it.
TEST_F(SchedulerProcessTest, AProcessTheSchedulerHasNoRoomForIsToldSo) {
  for (const bool answers : {true, false}) {
    const int listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket_.c_str(), sizeof addr.sun_path - 1);
    unlink(socket_.c_str());
    ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(listen(listener, 8), 0);
    std::thread full([listener, answers] {
      // Answers (or ignores) registrations until the listener is shut down; keeps every
      // connection open meanwhile, so that a client's wait for the answer ends only by it
      // or by the client's own timeout, however slowly either side runs.
      std::vector<int> kept;
      for (;;) {
        const int c = accept(listener, nullptr, nullptr);
        if (c < 0) break;
        kept.push_back(c);
        wire::RegisterRequest req;
        if (recv(c, &req, sizeof req, 0) == sizeof req && answers) {
          wire::RegisterReply reply;
          reply.status = wire::RegisterStatus::kFull;
          std::strncpy(reply.message, "all process slots are in use", sizeof reply.message - 1);
          send(c, &reply, sizeof reply, MSG_NOSIGNAL);
        }
      }
      for (const int c : kept) close(c);
    });
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("CUSLICE_SOCKET", socket_.c_str(), 1);
      const bool busy = client::attach() == client::AttachStatus::kBusy;
      const bool explained = !answers || std::strstr(client::last_error(), "all process slots") != nullptr;
      _exit(busy && explained && !client::attached() ? 0 : 1);
    }
    children_.push_back(pid);
    EXPECT_EQ(wait_exit(pid), 0) << (answers ? "answered full" : "never answered");
    shutdown(listener, SHUT_RDWR);
    full.join();
    close(listener);
  }
}

TEST_F(SchedulerProcessTest, WithoutADaemonEverythingIsUngated) {
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("CUSLICE_SOCKET", socket_.c_str(), 1);
    const auto start = Clock::now();
    if (client::attach() != client::AttachStatus::kNoDaemon) _exit(1);
    if (Clock::now() - start > 1s) _exit(2);
    client::token_acquire(0);
    if (client::memory_try_reserve(0, 1ull << 40) != client::Reserve::kUngated) _exit(3);
    client::memory_release(0, 1ull << 40);
    _exit(0);
  }
  children_.push_back(pid);
  EXPECT_EQ(wait_exit(pid), 0);
}

TEST_F(SchedulerProcessTest, ReloadKeepsTheRunningConfigurationOnErrors) {
  write_config("tenants:\n  - {name: a, allow_env: true}\n");
  start_daemon();
  write_config("tenants:\n  - {name: a, memroy: 1GiB}\n");
  kill(scheduler_.pid(), SIGHUP);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(wait_exit(spawn("a", [] { return 0; })), 0) << "the daemon stopped serving";
  write_config("tenants:\n  - {name: a, allow_env: true}\n  - {name: added, allow_env: true}\n");
  kill(scheduler_.pid(), SIGHUP);
  EXPECT_TRUE(eventually([&] {
    for (const shm::Tenant& t : segment_->tenants)
      if (t.state.load() == shm::Tenant::kActive && std::string(t.name) == "added") return true;
    return false;
  }, 2000ms));
  EXPECT_EQ(wait_exit(spawn("added", [] { return 0; })), 0);
}

TEST_F(SchedulerProcessTest, RefusesToStartOnABadConfiguration) {
  write_config("tenants:\n  - {name: a, compute: {share: 101%}}\n");
  const pid_t pid = fork();
  if (pid == 0) {
    execl(test_kit::ScopedScheduler::binary(), test_kit::ScopedScheduler::binary(), "--config", config_.c_str(), "--socket", socket_.c_str(),
          "--shm-name", shm_name_.c_str(), nullptr);
    _exit(127);
  }
  children_.push_back(pid);
  EXPECT_EQ(wait_exit(pid), 3);  // ExitCode::kConfigInvalid (protocol/exit_codes.h)
  EXPECT_FALSE(daemon_listening());
}

}  // namespace
}  // namespace cuslice
