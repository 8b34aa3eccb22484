// The MPS model: the fake nvidia-cuda-mps-control (daemon and command mode) and the fake libcuda
// as its client. Every test has a pipe and a log directory of its own; the daemon runs as a
// child process, clients are this process (with CUDA_MPS_* set for the test) or forked children
// that start the fake afresh, as new processes would.
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "tests/fake_driver/test/fake_driver_test.h"

namespace {

constexpr auto kPatience = std::chrono::seconds(30);  // a loaded machine is slow, never this slow

class Mps : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/fake-mps-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
    pipe_ = root_ + "/pipe";
    log_ = root_ + "/log";
  }

  void TearDown() override {
    children_.KillAll();
    if (std::filesystem::exists(Socket())) Control("quit\n");  // a daemon started with -d
    for (const char* name : {"CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                             "CUDA_MPS_CLIENT_PRIORITY", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
                             "FAKE_CUDA_DEVICE_COUNT"}) {
      unsetenv(name);
    }
    fake_cuda_reset();
    std::filesystem::remove_all(root_);
  }

  std::string Socket() const { return pipe_ + "/control"; }

  std::string Environment() const {
    return "CUDA_MPS_PIPE_DIRECTORY='" + pipe_ + "' CUDA_MPS_LOG_DIRECTORY='" + log_ + "' ";
  }

  // Runs nvidia-cuda-mps-control with option (or the command mode, fed input) and returns its
  // exit status; its output in *output.
  int Run(const std::string& option, const std::string& input, std::string* output = nullptr) {
    const std::string command = "printf '%s' '" + input + "' | " + Environment() + "'" FAKE_TEST_MPS_CONTROL "' " +
                                option + " 2>&1";
    FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) return -1;
    std::string text;
    char buffer[512];
    for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) text.append(buffer, n);
    const int status = pclose(pipe);
    if (output != nullptr) *output = text;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  int Control(const std::string& input, std::string* output = nullptr) { return Run("", input, output); }

  // Whether the daemon accepts connections (not merely whether its socket file exists).
  bool Answers() const {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::snprintf(address.sun_path, sizeof address.sun_path, "%s", Socket().c_str());
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    const bool connected = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
    close(fd);
    return connected;
  }

  // The daemon in the foreground (-f), as a child; returns once it accepts connections.
  pid_t StartDaemon() {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("CUDA_MPS_PIPE_DIRECTORY", pipe_.c_str(), 1);
      setenv("CUDA_MPS_LOG_DIRECTORY", log_.c_str(), 1);
      execl(FAKE_TEST_MPS_CONTROL, FAKE_TEST_MPS_CONTROL, "-f", static_cast<char*>(nullptr));
      _exit(127);
    }
    children_.Adopt(pid);
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (!Answers() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_TRUE(Answers()) << "the daemon never listened on " << Socket();
    return pid;
  }

  pid_t Spawn(std::function<int()> body) { return children_.Spawn(std::move(body)); }
  int WaitExit(pid_t pid) { return children_.WaitExit(pid); }

  // This process as a client of the test's pipe directory (the fake started afresh).
  CUresult Connect(std::initializer_list<std::pair<const char*, const char*>> settings = {}) {
    setenv("CUDA_MPS_PIPE_DIRECTORY", pipe_.c_str(), 1);
    for (const auto& [name, value] : settings) setenv(name, value, 1);
    fake_cuda_reset();
    return cuInit(0);
  }

  std::string ControlLog() const {
    std::ifstream file(log_ + "/control.log");
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
  }

  std::string root_, pipe_, log_;
  ChildProcesses children_;
};

CUcontext UsePrimary() {
  CUcontext ctx = nullptr;
  if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) return nullptr;
  return ctx;
}

CUfunction Kernel(const char* name) {
  static const char image[] = "any bytes";
  CUmodule module = nullptr;
  CUfunction f = nullptr;
  if (cuModuleLoadData(&module, image) != CUDA_SUCCESS || cuModuleGetFunction(&f, module, name) != CUDA_SUCCESS)
    return nullptr;
  return f;
}

CUresult Launch(CUfunction f) { return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr); }

TEST_F(Mps, WithoutADaemonCuInitFailsWithConnectionFailed) {
  EXPECT_EQ(Connect(), CUDA_ERROR_MPS_CONNECTION_FAILED);
  EXPECT_EQ(fake_cuda_mps_client(nullptr), 0);
  EXPECT_EQ(cuDeviceGetCount(nullptr), CUDA_ERROR_NOT_INITIALIZED);

  // A socket a killed daemon left behind: nothing listens on it.
  ASSERT_TRUE(std::filesystem::create_directories(pipe_));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof address.sun_path, "%s", Socket().c_str());
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  close(fd);
  EXPECT_EQ(Connect(), CUDA_ERROR_MPS_CONNECTION_FAILED);
  // A daemon started now replaces it.
  StartDaemon();
  EXPECT_EQ(Connect(), CUDA_SUCCESS);
}

TEST_F(Mps, WithoutThePipeDirectoryAProcessIsNoClient) {
  unsetenv("CUDA_MPS_PIPE_DIRECTORY");
  fake_cuda_reset();
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  int enabled = -1;
  EXPECT_EQ(cuDeviceGetAttribute(&enabled, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, 0), CUDA_SUCCESS);
  EXPECT_EQ(enabled, 0);
  fake_cuda_mps_client_info info{};
  EXPECT_EQ(fake_cuda_mps_client(&info), 0);
  EXPECT_EQ(info.active_thread_percentage, 100);
}

TEST_F(Mps, AClientConnectsWithItsSettings) {
  StartDaemon();
  ASSERT_EQ(Connect({{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25"},
                     {"CUDA_MPS_CLIENT_PRIORITY", "1"},
                     {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=4G,1=512M"},
                     {"FAKE_CUDA_DEVICE_COUNT", "2"}}),
            CUDA_SUCCESS);
  fake_cuda_mps_client_info info{};
  ASSERT_EQ(fake_cuda_mps_client(&info), 1);
  EXPECT_EQ(info.connected, 1);
  EXPECT_EQ(info.active_thread_percentage, 25);
  EXPECT_EQ(info.client_priority, 1);
  EXPECT_EQ(info.pinned_limit[0], 4 * kGiB);
  EXPECT_EQ(info.pinned_limit[1], 512 * kMiB);
  EXPECT_EQ(info.pinned_limit[2], 0u);
  EXPECT_EQ(std::string(info.pipe_directory), pipe_);
  EXPECT_EQ(info.server_generation, 1u);
  int enabled = 0;
  EXPECT_EQ(cuDeviceGetAttribute(&enabled, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, 1), CUDA_SUCCESS);
  EXPECT_EQ(enabled, 1);

  // The daemon logged the client and started a live server for it.
  const std::string log = ControlLog();
  EXPECT_NE(log.find("NEW CLIENT " + std::to_string(getpid()) + " from user"), std::string::npos) << log;
  EXPECT_NE(log.find("active thread percentage 25, priority 1"), std::string::npos) << log;
  std::string servers;
  ASSERT_EQ(Control("get_server_list\n", &servers), 0);
  const int server = std::atoi(servers.c_str());
  ASSERT_GT(server, 0) << servers;
  EXPECT_EQ(kill(server, 0), 0);
  std::string clients;
  EXPECT_EQ(Control("get_client_list " + std::to_string(server) + "\n", &clients), 0);
  EXPECT_EQ(clients, std::to_string(getpid()) + "\n");
}

TEST_F(Mps, SettingsThatDoNotParseFailCuInit) {
  StartDaemon();
  EXPECT_EQ(Connect({{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "0"}}), CUDA_ERROR_INVALID_VALUE);
  unsetenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
  EXPECT_EQ(Connect({{"CUDA_MPS_CLIENT_PRIORITY", "2"}}), CUDA_ERROR_INVALID_VALUE);
  unsetenv("CUDA_MPS_CLIENT_PRIORITY");
  EXPECT_EQ(Connect({{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=4X"}}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Connect({{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "16=1G"}}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Connect({{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1G,1=2048K"}}), CUDA_SUCCESS);
}

TEST_F(Mps, ThePinnedLimitRefusesAllocationsBeyondIt) {
  StartDaemon();
  ASSERT_EQ(Connect({{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=64M"}}), CUDA_SUCCESS);
  ASSERT_NE(UsePrimary(), nullptr);  // its context's memory does not count
  CUdeviceptr a = 0, b = 0, c = 0;
  ASSERT_EQ(cuMemAlloc_v2(&a, 32 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAlloc_v2(&b, 48 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cuMemAlloc_v2(&b, 32 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAlloc_v2(&c, 1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemAllocAsync(&c, 2 * kMiB, nullptr), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cuMemFree_v2(b), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAlloc_v2(&c, 32 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(fake_cuda_device_used_by(0, FAKE_CUDA_CHARGE_ALLOCATION), 64 * kMiB);
}

TEST_F(Mps, QuitOnStdinStopsTheDaemonAndRemovesItsSocket) {
  const pid_t daemon = StartDaemon();
  std::ifstream pid_file(pipe_ + "/nvidia-cuda-mps-control.pid");
  int pid = 0;
  EXPECT_TRUE(pid_file >> pid);
  EXPECT_EQ(pid, daemon);
  std::string output;
  EXPECT_EQ(Control("get_server_list\nno_such_command 1\n", &output), 0);
  EXPECT_EQ(output, "Error: unknown command: no_such_command 1\n");  // no server yet: no pid
  EXPECT_EQ(Control("quit\n", &output), 0);
  EXPECT_EQ(WaitExit(daemon), 0);
  EXPECT_FALSE(std::filesystem::exists(Socket()));
  EXPECT_NE(ControlLog().find("Exiting (quit command)"), std::string::npos);
  EXPECT_NE(Control("get_server_list\n", &output), 0) << output;  // nothing answers now
  EXPECT_EQ(Connect(), CUDA_ERROR_MPS_CONNECTION_FAILED);
}

TEST_F(Mps, SigtermStopsTheDaemonAndRemovesItsSocket) {
  const pid_t daemon = StartDaemon();
  ASSERT_EQ(kill(daemon, SIGTERM), 0);
  EXPECT_EQ(WaitExit(daemon), 0);
  EXPECT_FALSE(std::filesystem::exists(Socket()));
}

TEST_F(Mps, ASecondDaemonOnThePipeDirectoryIsRefused) {
  StartDaemon();
  std::string output;
  EXPECT_NE(Run("-f", "", &output), 0);
  EXPECT_NE(output.find("already running"), std::string::npos) << output;
  EXPECT_NE(Run("-d", "", &output), 0);
  EXPECT_TRUE(Answers());  // the first one is unharmed
  EXPECT_EQ(Control("get_server_list\n"), 0);
}

TEST_F(Mps, DaemonisedItListensWhenTheCommandReturns) {
  ASSERT_EQ(Run("-d", ""), 0);
  EXPECT_TRUE(Answers());
  std::ifstream pid_file(pipe_ + "/nvidia-cuda-mps-control.pid");
  int pid = 0;
  ASSERT_TRUE(pid_file >> pid);
  EXPECT_EQ(kill(pid, 0), 0);  // the daemon's, not the command's that returned
  EXPECT_EQ(Connect(), CUDA_SUCCESS);
  EXPECT_EQ(Control("quit\n"), 0);
  EXPECT_FALSE(std::filesystem::exists(Socket()));
  EXPECT_FALSE(std::filesystem::exists(pipe_ + "/nvidia-cuda-mps-control.pid"));
}

// A client that connected, launched, and after the parent's word (a byte on `go`) tries again.
int VictimBody(const std::string& pipe_directory, int ready, int go) {
  setenv("CUDA_MPS_PIPE_DIRECTORY", pipe_directory.c_str(), 1);
  fake_cuda_reset();
  if (cuInit(0) != CUDA_SUCCESS || UsePrimary() == nullptr) return 1;
  CUfunction f = Kernel("spin_10us");
  CUdeviceptr p = 0;
  if (f == nullptr || Launch(f) != CUDA_SUCCESS || cuMemAlloc_v2(&p, kMiB) != CUDA_SUCCESS) return 2;
  char byte = 1;
  if (write(ready, &byte, 1) != 1 || read(go, &byte, 1) != 1) return 3;
  if (Launch(f) != CUDA_ERROR_MPS_CLIENT_TERMINATED) return 4;
  if (cuCtxSynchronize() != CUDA_ERROR_MPS_CLIENT_TERMINATED) return 5;
  if (cuStreamSynchronize(nullptr) != CUDA_ERROR_MPS_CLIENT_TERMINATED) return 6;
  if (cuMemAlloc_v2(&p, kMiB) != CUDA_ERROR_MPS_CLIENT_TERMINATED) return 7;
  return 0;
}

TEST_F(Mps, AFaultEndsTheServerForEveryClientAndANewClientGetsANewOne) {
  StartDaemon();
  int ready[2], go[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(go), 0);
  const pid_t victim = Spawn([&] { return VictimBody(pipe_, ready[1], go[0]); });
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1) << "the victim exited with " << WaitExit(victim);
  std::string first_server;
  ASSERT_EQ(Control("get_server_list\n", &first_server), 0);

  const pid_t faulty = Spawn([&] {
    setenv("CUDA_MPS_PIPE_DIRECTORY", pipe_.c_str(), 1);
    fake_cuda_reset();
    if (cuInit(0) != CUDA_SUCCESS || UsePrimary() == nullptr) return 1;
    CUfunction f = Kernel("mps_fault_illegal_address");
    if (f == nullptr || Launch(f) != CUDA_ERROR_ILLEGAL_ADDRESS) return 2;
    if (cuCtxSynchronize() != CUDA_ERROR_ILLEGAL_ADDRESS) return 3;  // its own context is poisoned
    return fake_cuda_faults() == 1 ? 0 : 4;
  });
  EXPECT_EQ(WaitExit(faulty), 0);
  ASSERT_EQ(write(go[1], &byte, 1), 1);
  EXPECT_EQ(WaitExit(victim), 0);

  // A client that starts now connects to a new server, of the next generation, and works.
  ASSERT_EQ(Connect(), CUDA_SUCCESS);
  fake_cuda_mps_client_info info{};
  ASSERT_EQ(fake_cuda_mps_client(&info), 1);
  EXPECT_EQ(info.server_generation, 2u);
  ASSERT_NE(UsePrimary(), nullptr);
  CUfunction f = Kernel("spin_10us");
  CUdeviceptr p = 0;
  EXPECT_EQ(Launch(f), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAlloc_v2(&p, kMiB), CUDA_SUCCESS);
  std::string second_server;
  ASSERT_EQ(Control("get_server_list\n", &second_server), 0);
  EXPECT_NE(second_server, first_server);
  EXPECT_FALSE(second_server.empty());
  const std::string log = ControlLog();
  EXPECT_NE(log.find("faulted in kernel mps_fault_illegal_address"), std::string::npos) << log;
  EXPECT_NE(log.find("Server generation is now 2"), std::string::npos) << log;
  for (int fd : {ready[0], ready[1], go[0], go[1]}) close(fd);
}

// Stopping the daemon ends its server too: its clients are terminated.
TEST_F(Mps, ClientsOfAStoppedDaemonAreTerminated) {
  StartDaemon();
  ASSERT_EQ(Connect(), CUDA_SUCCESS);
  ASSERT_NE(UsePrimary(), nullptr);
  CUfunction f = Kernel("spin_10us");
  ASSERT_EQ(Launch(f), CUDA_SUCCESS);
  ASSERT_EQ(Control("quit\n"), 0);
  EXPECT_EQ(Launch(f), CUDA_ERROR_MPS_CLIENT_TERMINATED);
}

}  // namespace
