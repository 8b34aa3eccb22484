// A process that plays a hooked application for the end-to-end tests of the scheduler and
// the CLI: it registers and uses the segment through hook/link/client.h, exactly the calls
// libcuslice.so makes, prints "ready", and stays registered until its stdin closes (so the
// test decides when it leaves).
//
//   fake_hooked_process [--gpu N] [--memory-total BYTES] [--uuid HEX32] [--reserve BYTES]
//                       [--over-quota BYTES] [--gpu-time-ms MS] [--hold] [--wait]
//
//   --memory-total/--uuid   what the hook learns from the driver about the card (set_device)
//   --reserve               bytes reserved against the tenant's quota (must succeed)
//   --over-quota            a reservation the quota must refuse, counted as the hook does
//   --gpu-time-ms           one "kernel": acquire the token, report that much GPU time, release
//   --hold                  acquire the token and keep it (busy) until exit
//   --wait                  after "ready", block in token_acquire (another tenant holds it)
//
// Exit status: 0 after stdin closes, 100 when attaching fails (the reason on stderr), 1 when a
// reservation does not behave as asked, 2 on bad arguments.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "hook/link/client.h"

namespace {

namespace client = cuslice::client;

struct Args {
  int gpu = 0;
  uint64_t memory_total = 0;
  bool has_uuid = false;
  unsigned char uuid[16] = {};
  uint64_t reserve = 0;
  uint64_t over_quota = 0;
  uint64_t gpu_time_ms = 0;
  bool hold = false;
  bool wait = false;
};

bool parse_uuid(const char* hex, unsigned char (&out)[16]) {
  if (std::strlen(hex) != 32) return false;
  for (int i = 0; i < 16; ++i) {
    const char byte[3] = {hex[2 * i], hex[2 * i + 1], '\0'};
    char* end = nullptr;
    out[i] = static_cast<unsigned char>(std::strtoul(byte, &end, 16));
    if (*end != '\0') return false;
  }
  return true;
}

bool parse(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--hold") {
      a.hold = true;
    } else if (flag == "--wait") {
      a.wait = true;
    } else if (i + 1 >= argc) {
      return false;
    } else if (flag == "--uuid") {
      if (!parse_uuid(argv[++i], a.uuid)) return false;
      a.has_uuid = true;
    } else {
      const uint64_t value = std::strtoull(argv[++i], nullptr, 10);
      if (flag == "--gpu") a.gpu = static_cast<int>(value);
      else if (flag == "--memory-total") a.memory_total = value;
      else if (flag == "--reserve") a.reserve = value;
      else if (flag == "--over-quota") a.over_quota = value;
      else if (flag == "--gpu-time-ms") a.gpu_time_ms = value;
      else return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, a)) {
    std::fprintf(stderr, "usage: see the top of fake_hooked_process.cpp\n");
    return 2;
  }
  if (client::attach() != client::AttachStatus::kAttached) {
    std::fprintf(stderr, "attach failed: %s\n", client::last_error());
    return 100;
  }
  if (a.memory_total != 0 || a.has_uuid) client::set_device(a.gpu, a.memory_total, a.has_uuid ? a.uuid : nullptr);
  if (a.reserve != 0 && client::memory_try_reserve(a.gpu, a.reserve) != client::Reserve::kOk) {
    std::fprintf(stderr, "reserving %llu bytes failed\n", static_cast<unsigned long long>(a.reserve));
    return 1;
  }
  if (a.over_quota != 0) {
    if (client::memory_try_reserve(a.gpu, a.over_quota) != client::Reserve::kOverQuota) {
      std::fprintf(stderr, "a reservation over the quota was not refused\n");
      return 1;
    }
    client::note_oom_refusal(a.gpu);
  }
  if (a.gpu_time_ms != 0) {
    client::token_acquire(a.gpu);
    client::report_gpu_time(a.gpu, a.gpu_time_ms * 1'000'000);
    client::token_release(a.gpu);
  }
  if (a.hold) client::token_acquire(a.gpu);
  std::printf("ready\n");
  std::fflush(stdout);
  // Waits on its own thread, so that stdin still decides when the process leaves.
  if (a.wait) std::thread([gpu = a.gpu] { client::token_acquire(gpu); }).detach();
  char buf[64];
  while (read(STDIN_FILENO, buf, sizeof buf) > 0) {
  }
  // A waiting thread may still be blocked: leave without unwinding it.
  std::fflush(nullptr);
  _exit(0);
}
