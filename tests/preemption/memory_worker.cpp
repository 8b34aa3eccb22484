// A stand-in for a GPU application whose memory the scheduler may suspend, for the preemption
// scenarios (test_preemption.py): it runs under libcuslice.so against the fake driver and does
// what its standard input says, one command a line, answering one line each on standard output:
//
//   init             cuInit, the primary context made current        -> ok MS
//   alloc BYTES      cuMemAlloc_v2 (kept until `free`)                 -> ok MS | err CODE MS
//   managed BYTES    cuMemAllocManaged                                 -> ok MS | err CODE MS
//   free             frees everything allocated                        -> ok MS
//   sync             cuCtxSynchronize (a driver call a lock holds)     -> ok MS | err CODE MS
//   info             cuMemGetInfo_v2                                   -> ok MS FREE TOTAL
//   async BYTES      cuMemAllocAsync on the legacy stream, then a stream synchronize (kept
//                    until `free`)                                     -> ok MS | err CODE MS
//   fill SEED        writes a pattern (of SEED, the allocation and the place) into 4 KiB every
//                    64 MiB of every allocation, with cuMemcpyHtoD_v2 -> ok MS | err CODE MS
//   check SEED       reads it back (cuMemcpyDtoH_v2): err 999 when it differs
//   copy             one cuMemcpyHtoD_v2 of 4 KiB into the first allocation -> ok MS | err CODE MS
//   launch           one kernel (the fake's spin_1000us), then cuCtxSynchronize -> ok MS | err CODE MS
//   spin MS          spin_1000us kernels one after another for MS milliseconds, then a
//                    cuCtxSynchronize                                  -> ok MS | err CODE MS
//   mps              what the fake driver's MPS client connected with (after init)
//                    -> ok MS CONNECTED THREAD_PERCENTAGE PRIORITY LIMIT0_BYTES PIPE_DIRECTORY
//   exit             exits 0
//
// Run without libcuslice.so preloaded, it can also play a process that speaks to the scheduler
// itself (hook/link/client.h, as the hook would) and then does what it likes:
//   attach           registers with the scheduler (CUSLICE_SOCKET, CUSLICE_TENANT) -> ok MS | err STATUS MS
//   claim FLAGS      says it uses FLAGS (shm::kUses*), as the hook says it: its own record and
//                    its own connection                                -> ok MS
//   claim-for PID FLAGS  writes FLAGS into the record of the tenant's process PID, as any
//                    process of the tenant can write                  -> ok MS | err 1 MS
//   reserve BYTES    charges BYTES on GPU 0 to the tenant's quota      -> ok MS | err 2 MS
//   ask BYTES        asks the scheduler for room for BYTES on GPU 0, saying the card has nothing
//                    free, and waits 10 s at most for its answer -> ok MS retry|refused|timeout|detached
//   lie              says its hook can move what it allocated, then answers every order of the
//                    fast suspension as done without moving anything (a tenant's lie) -> ok MS
//
// MS is how long the call took, in milliseconds: how long a lock or a wait for room held it.
#include <cuda.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>
#include <sstream>
#include <string>
#include <vector>

#include "hook/link/client.h"
#include "hook/link/client_state.h"
#include "tests/fake_driver/fake_cuda_control.h"

namespace {

namespace client = cuslice::client;

double now_ms() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

void answer(CUresult rc, double started, const std::string& extra = "") {
  const double took = now_ms() - started;
  if (rc == CUDA_SUCCESS) {
    std::printf("ok %.1f%s\n", took, extra.c_str());
  } else {
    std::printf("err %d %.1f\n", static_cast<int>(rc), took);
  }
  std::fflush(stdout);
}

constexpr uint64_t kStride = uint64_t{64} << 20;
constexpr size_t kBlock = 4096;

void pattern(unsigned seed, size_t allocation, uint64_t offset, unsigned char* out) {
  uint64_t x = (static_cast<uint64_t>(seed) << 40) ^ (static_cast<uint64_t>(allocation) << 32) ^ offset;
  for (size_t i = 0; i < kBlock; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    out[i] = static_cast<unsigned char>(x >> 56);
  }
}

// Answers the fast suspension's orders as done, moving nothing.
void lie(uint64_t bytes) {
  client::report_movable(bytes, 0, 0);
  std::thread([bytes] {
    client::MoveOrder seen = client::current_move_order();
    for (;;) {
      const client::MoveOrder o = client::wait_move_order(seen, 100'000'000);
      if (o.kind == 0) continue;
      seen = o;
      const bool out = o.kind == static_cast<uint32_t>(cuslice::shm::MoveOrder::kMoveOut);
      client::finish_move(o, static_cast<uint32_t>(cuslice::shm::MoveResult::kDone), out ? o.bytes : 0, 1000);
      client::report_movable(bytes, out ? o.bytes : 0, 0);
    }
  }).detach();
}

}  // namespace

int main() {
  std::vector<CUdeviceptr> held, held_async;
  std::vector<uint64_t> sizes;
  CUfunction kernel = nullptr;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream words(line);
    std::string command;
    unsigned long long bytes = 0;
    words >> command >> bytes;
    const double started = now_ms();
    if (command == "init") {
      CUcontext ctx = nullptr;
      CUresult rc = cuInit(0);
      if (rc == CUDA_SUCCESS) rc = cuDevicePrimaryCtxRetain(&ctx, 0);
      if (rc == CUDA_SUCCESS) rc = cuCtxSetCurrent(ctx);
      answer(rc, started);
    } else if (command == "alloc" || command == "managed") {
      CUdeviceptr p = 0;
      const CUresult rc = command == "alloc" ? cuMemAlloc_v2(&p, bytes)
                                             : cuMemAllocManaged(&p, bytes, CU_MEM_ATTACH_GLOBAL);
      if (rc == CUDA_SUCCESS) {
        held.push_back(p);
        sizes.push_back(bytes);
      }
      answer(rc, started);
    } else if (command == "async") {
      CUdeviceptr p = 0;
      CUresult rc = cuMemAllocAsync(&p, bytes, nullptr);
      if (rc == CUDA_SUCCESS) {
        held_async.push_back(p);
        rc = cuStreamSynchronize(nullptr);
      }
      answer(rc, started);
    } else if (command == "free") {
      CUresult rc = CUDA_SUCCESS;
      for (CUdeviceptr p : held) {
        if (CUresult r = cuMemFree_v2(p)) rc = r;
      }
      for (CUdeviceptr p : held_async) {
        if (CUresult r = cuMemFreeAsync(p, nullptr)) rc = r;
      }
      if (!held_async.empty()) {
        if (CUresult r = cuStreamSynchronize(nullptr)) rc = r;
      }
      held.clear();
      sizes.clear();
      held_async.clear();
      answer(rc, started);
    } else if (command == "attach") {
      const client::AttachStatus status = client::attach();
      if (status == client::AttachStatus::kAttached) {
        answer(CUDA_SUCCESS, started);
      } else {
        std::printf("err %d %.1f\n", static_cast<int>(status), now_ms() - started);
        std::fflush(stdout);
      }
    } else if (command == "claim") {
      client::note_checkpoint_blocker(static_cast<uint32_t>(bytes));
      answer(CUDA_SUCCESS, started);
    } else if (command == "claim-for") {
      // `bytes` is the pid here; the flags follow.
      unsigned int flags = 0;
      words >> flags;
      const cuslice::client::internal::Attachment* att = cuslice::client::internal::g.current.load();
      bool written = false;
      for (uint32_t slot = 0; att != nullptr && slot < cuslice::shm::kMaxProcesses; ++slot) {
        if (att->segment->processes[slot].pid.load() != static_cast<int32_t>(bytes)) continue;
        att->region->processes[slot].checkpoint_flags.fetch_or(flags);
        written = true;
      }
      answer(written ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE, started);
    } else if (command == "reserve") {
      const bool ok = client::memory_try_reserve(0, bytes) == client::Reserve::kOk;
      answer(ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY, started);
    } else if (command == "sync") {
      answer(cuCtxSynchronize(), started);
    } else if (command == "info") {
      size_t free = 0, total = 0;
      const CUresult rc = cuMemGetInfo_v2(&free, &total);
      answer(rc, started, " " + std::to_string(free) + " " + std::to_string(total));
    } else if (command == "fill" || command == "check") {
      unsigned char want[kBlock], got[kBlock];
      CUresult rc = CUDA_SUCCESS;
      for (size_t a = 0; a < held.size() && rc == CUDA_SUCCESS; ++a) {
        for (uint64_t at = 0; at + kBlock <= sizes[a] && rc == CUDA_SUCCESS; at += kStride) {
          pattern(static_cast<unsigned>(bytes), a, at, want);
          if (command == "fill") {
            rc = cuMemcpyHtoD_v2(held[a] + at, want, kBlock);
          } else {
            rc = cuMemcpyDtoH_v2(got, held[a] + at, kBlock);
            if (rc == CUDA_SUCCESS && std::memcmp(want, got, kBlock) != 0) rc = static_cast<CUresult>(999);
          }
        }
      }
      answer(rc, started);
    } else if (command == "copy") {
      unsigned char block[kBlock] = {};
      answer(held.empty() ? CUDA_ERROR_INVALID_VALUE : cuMemcpyHtoD_v2(held[0], block, kBlock), started);
    } else if (command == "launch" || command == "spin") {
      CUresult rc = CUDA_SUCCESS;
      if (kernel == nullptr) {
        CUmodule module = nullptr;
        static const char image[] = "memory_worker";
        rc = cuModuleLoadData(&module, image);
        if (rc == CUDA_SUCCESS) rc = cuModuleGetFunction(&kernel, module, "spin_1000us");
      }
      const double until = started + (command == "spin" ? static_cast<double>(bytes) : 0.0);
      do {
        if (rc == CUDA_SUCCESS) rc = cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
        // Queued work stays short, as an application's does between its synchronisations.
        if (rc == CUDA_SUCCESS) rc = cuCtxSynchronize();
      } while (rc == CUDA_SUCCESS && now_ms() < until);
      answer(rc, started);
    } else if (command == "mps") {
      fake_cuda_mps_client_info info{};
      const int connected = fake_cuda_mps_client(&info);
      answer(CUDA_SUCCESS, started,
             " " + std::to_string(connected) + " " + std::to_string(info.active_thread_percentage) + " " +
                 std::to_string(info.client_priority) + " " + std::to_string(info.pinned_limit[0]) + " " +
                 (info.pipe_directory[0] != '\0' ? std::string(info.pipe_directory) : std::string("-")));
    } else if (command == "ask") {
      timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      const int64_t until = ts.tv_sec * 1'000'000'000LL + ts.tv_nsec + 10'000'000'000LL;
      const client::MemoryAnswer a = client::request_memory(0, bytes, 0, until);
      const char* said = a == client::MemoryAnswer::kRetry     ? "retry"
                         : a == client::MemoryAnswer::kRefused ? "refused"
                         : a == client::MemoryAnswer::kTimedOut ? "timeout"
                                                                : "detached";
      answer(CUDA_SUCCESS, started, std::string(" ") + said);
    } else if (command == "lie") {
      uint64_t total = 0;
      for (uint64_t b : sizes) total += b;
      lie(total);
      answer(CUDA_SUCCESS, started);
    } else if (command == "exit") {
      return 0;
    } else {
      std::printf("bad command\n");
      std::fflush(stdout);
    }
  }
  return 0;
}
