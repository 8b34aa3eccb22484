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
//   exit             exits 0
//
// Run without libcuslice.so preloaded, it can also play a process that speaks to the scheduler
// itself (protocol/client.h, as the hook would) and then does what it likes:
//   attach           registers with the scheduler (CUSLICE_SOCKET, CUSLICE_TENANT) -> ok MS | err STATUS MS
//   claim FLAGS      says it uses FLAGS (shm::kUses*), as the hook says it: its own record and
//                    its own connection                                -> ok MS
//   claim-for PID FLAGS  writes FLAGS into the record of the tenant's process PID, as any
//                    process of the tenant can write                  -> ok MS | err 1 MS
//   reserve BYTES    charges BYTES on GPU 0 to the tenant's quota      -> ok MS | err 2 MS
//
// MS is how long the call took, in milliseconds: how long a lock or a wait for room held it.
#include <cuda.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "client.h"
#include "client_state.h"

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

}  // namespace

int main() {
  std::vector<CUdeviceptr> held, held_async;
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
      if (rc == CUDA_SUCCESS) held.push_back(p);
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
    } else if (command == "exit") {
      return 0;
    } else {
      std::printf("bad command\n");
      std::fflush(stdout);
    }
  }
  return 0;
}
