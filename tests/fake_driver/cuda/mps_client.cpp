// The fake libcuda's MPS client (mps_client.h) and its control API, fake_cuda_mps_client.
#include "tests/fake_driver/cuda/mps_client.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "tests/fake_driver/cuda/driver_state.h"
#include "tests/fake_driver/fake_cuda_control.h"
#include "tests/fake_driver/mps/mps_wire.h"

namespace fake_cuda {
namespace {

// Long enough for a daemon on a loaded machine; a daemon that never answers still fails cuInit.
constexpr int kExchangeTimeoutMs = 10'000;

// A whole decimal number in [low, high] into *value.
bool parse_int(const char* text, int low, int high, int* value) {
  if (text == nullptr || *text < '0' || *text > '9') return false;
  char* end = nullptr;
  errno = 0;
  const long parsed = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || parsed < low || parsed > high) return false;
  *value = static_cast<int>(parsed);
  return true;
}

bool parse_bytes(const std::string& text, std::uint64_t* bytes) {
  if (text.empty() || text[0] < '0' || text[0] > '9') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long number = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0) return false;
  static constexpr char kUnits[] = "KMGT";  // powers of 1024, either case
  int shift = 0;
  if (*end != '\0') {
    const char* unit = std::strchr(kUnits, std::toupper(static_cast<unsigned char>(*end)));
    if (unit == nullptr) return false;
    shift = 10 * static_cast<int>(unit - kUnits + 1);
    ++end;
  }
  if (*end != '\0' || number > (~0ull >> shift)) return false;
  *bytes = number << shift;
  return true;
}

bool read_settings(MpsClient* client) {
  int value = 0;
  if (const char* text = std::getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")) {
    if (!parse_int(text, 1, 100, &value)) {
      std::fprintf(stderr, "fake libcuda: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=\"%s\" is not 1-100\n", text);
      return false;
    }
    client->thread_percentage = value;
  }
  if (const char* text = std::getenv("CUDA_MPS_CLIENT_PRIORITY")) {
    if (!parse_int(text, 0, 1, &value)) {
      std::fprintf(stderr, "fake libcuda: CUDA_MPS_CLIENT_PRIORITY=\"%s\" is not 0 or 1\n", text);
      return false;
    }
    client->priority = value;
  }
  if (const char* text = std::getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")) {
    std::string error;
    if (!parse_pinned_limits(text, &client->pinned_limit, &error)) {
      std::fprintf(stderr, "fake libcuda: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=\"%s\": %s\n", text, error.c_str());
      return false;
    }
    client->pinned_text = text;
  }
  return true;
}

// Sends the hello and maps the generation file; false (a line on stderr) when no daemon answers.
bool say_hello(MpsClient* client) {
  const std::string& dir = client->directory;
  client->fd = fake_mps::connect_control(dir, kExchangeTimeoutMs);
  if (client->fd < 0) {
    std::fprintf(stderr, "fake libcuda: no MPS control daemon at %s: %s\n",
                 fake_mps::join_path(dir, fake_mps::kSocketName).c_str(), std::strerror(errno));
    return false;
  }
  std::ostringstream hello;
  hello << "hello pid=" << getpid() << " percentage=" << client->thread_percentage
        << " priority=" << client->priority
        << " pinned=" << (client->pinned_text.empty() ? "none" : client->pinned_text) << "\n";
  std::string answer;
  if (!fake_mps::send_text(client->fd, hello.str()) || !fake_mps::read_line(client->fd, &answer) ||
      answer.rfind("ok ", 0) != 0) {
    std::fprintf(stderr, "fake libcuda: the MPS control daemon at %s refused the client: %s\n", dir.c_str(),
                 answer.empty() ? "no answer" : answer.c_str());
    return false;
  }
  client->generation = std::strtoull(fake_mps::word_value(answer, "generation").c_str(), nullptr, 10);
  const std::string file = fake_mps::join_path(dir, fake_mps::kGenerationName);
  const int gen_fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  void* mapped = gen_fd < 0 ? MAP_FAILED : mmap(nullptr, sizeof(std::uint64_t), PROT_READ, MAP_SHARED, gen_fd, 0);
  if (gen_fd >= 0) close(gen_fd);
  if (mapped == MAP_FAILED) {
    std::fprintf(stderr, "fake libcuda: cannot map %s: %s\n", file.c_str(), std::strerror(errno));
    return false;
  }
  client->published = static_cast<const std::atomic<std::uint64_t>*>(mapped);
  return true;
}

}  // namespace

void MpsClient::disconnect() {
  if (fd >= 0) close(fd);
  if (published != nullptr) munmap(const_cast<std::atomic<std::uint64_t>*>(published), sizeof(std::uint64_t));
  *this = MpsClient{};
}

bool parse_pinned_limits(const std::string& text, std::array<std::uint64_t, kMaxDevices>* limits,
                         std::string* error) {
  std::array<std::uint64_t, kMaxDevices> parsed{};
  std::istringstream list(text);
  for (std::string entry; std::getline(list, entry, ',');) {
    const std::size_t equals = entry.find('=');
    int ordinal = 0;
    std::uint64_t bytes = 0;
    if (equals == std::string::npos || !parse_int(entry.substr(0, equals).c_str(), 0, kMaxDevices - 1, &ordinal) ||
        !parse_bytes(entry.substr(equals + 1), &bytes)) {
      *error = "entry \"" + entry + "\" is not <ordinal 0-15>=<bytes>[K|M|G|T]";
      return false;
    }
    parsed[ordinal] = bytes;
  }
  *limits = parsed;
  return true;
}

CUresult mps_connect(DriverState& state) {
  const char* directory = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  if (directory == nullptr || state.mps.connected) return CUDA_SUCCESS;
  MpsClient client;
  client.directory = directory;
  if (!read_settings(&client)) return CUDA_ERROR_INVALID_VALUE;
  if (!say_hello(&client)) {
    client.disconnect();
    return CUDA_ERROR_MPS_CONNECTION_FAILED;
  }
  client.connected = true;
  for (int dev = 0; dev < kMaxDevices; ++dev) state.ledger.set_limit(dev, client.pinned_limit[dev]);
  state.mps = client;
  return CUDA_SUCCESS;
}

CUresult mps_launch(DriverState& state, CUctx_st* ctx, const std::string& name) {
  if (CUresult rc = mps_check(state.mps)) return rc;
  if (!state.mps.connected || name.rfind("mps_fault", 0) != 0) return CUDA_SUCCESS;
  if (!ctx->faulted) ++state.faults;
  ctx->faulted = true;
  std::fprintf(stderr,
               "fake libcuda: fault: kernel %s under MPS: CUDA_ERROR_ILLEGAL_ADDRESS, context %p poisoned, "
               "MPS server of generation %llu ended (pid %d)\n",
               name.c_str(), static_cast<void*>(ctx), static_cast<unsigned long long>(state.mps.generation),
               static_cast<int>(getpid()));
  // Told on a connection of its own, and answered before the launch returns: once it has, every
  // other client of the server sees the new generation.
  const int fd = fake_mps::connect_control(state.mps.directory, kExchangeTimeoutMs);
  if (fd < 0) return CUDA_ERROR_ILLEGAL_ADDRESS;  // the daemon is gone: no other client is left to tell
  std::ostringstream line;
  line << "fault pid=" << getpid() << " generation=" << state.mps.generation << " kernel=" << name << "\n";
  std::string answer;
  if (fake_mps::send_text(fd, line.str())) fake_mps::read_line(fd, &answer);
  close(fd);
  return CUDA_ERROR_ILLEGAL_ADDRESS;
}

}  // namespace fake_cuda

using namespace fake_cuda;

extern "C" int fake_cuda_mps_client(fake_cuda_mps_client_info* out) {
  Session s(Session::kUngated);
  const MpsClient& client = s->mps;
  if (out != nullptr) {
    *out = fake_cuda_mps_client_info{};
    out->connected = client.connected ? 1 : 0;
    out->active_thread_percentage = client.connected ? client.thread_percentage : 100;
    out->client_priority = client.priority;
    for (int dev = 0; dev < kMaxDevices; ++dev) out->pinned_limit[dev] = client.pinned_limit[dev];
    std::snprintf(out->pipe_directory, sizeof out->pipe_directory, "%s", client.directory.c_str());
    out->server_generation = client.generation;
  }
  return client.connected ? 1 : 0;
}
