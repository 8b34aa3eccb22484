// Many threads allocating and freeing at once never take the process over its quota, and
// every byte charged comes back. CUSLICE_MEMORY_LIMIT=2GiB, fake contexts of 512 MiB.
#include <cuda.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "tests/hook/hook_test_support.h"

using namespace hook_test;

namespace {

constexpr uint64_t kQuota = 2 * kGiB;

class Concurrency : public CudaTest {};

TEST_F(Concurrency, ThreadsRacingForTheLastBytesNeverExceedTheQuota) {
  const uint64_t free_before = reported_free();
  CUcontext ctx;
  ASSERT_EQ(cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
  std::atomic<uint64_t> worst{0};
  std::atomic<int> refusals{0}, failures{0};
  auto worker = [&](unsigned seed) {
    cuCtxSetCurrent(ctx);
    std::mt19937_64 rng(seed);
    std::vector<std::pair<CUdeviceptr, bool>> held;  // pointer, async?
    CUstream s;
    cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    for (int i = 0; i < 400; ++i) {
      // Mix sizes around the page (small ones share pages) and both allocation kinds.
      const uint64_t sizes[] = {4096, 100000, 2 * kMiB, 3 * kMiB + 1, 40 * kMiB, 96 * kMiB};
      const uint64_t n = sizes[rng() % 6];
      const bool async = rng() % 4 == 0;
      CUdeviceptr p;
      const CUresult r = async ? cuMemAllocAsync(&p, n, s) : cuMemAlloc(&p, n);
      if (r == CUDA_SUCCESS) {
        held.emplace_back(p, async);
        uint64_t t = truth(), w = worst.load();
        while (t > w && !worst.compare_exchange_weak(w, t)) {
        }
      } else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        refusals++;
        // Give back half of what this thread holds.
        for (size_t k = 0; k < held.size() / 2; ++k) {
          auto [q, a] = held.back();
          held.pop_back();
          if ((a ? cuMemFreeAsync(q, s) : cuMemFree(q)) != CUDA_SUCCESS) failures++;
        }
        cuStreamSynchronize(s);
      } else {
        failures++;
      }
    }
    for (auto [q, a] : held)
      if ((a ? cuMemFreeAsync(q, s) : cuMemFree(q)) != CUDA_SUCCESS) failures++;
    cuStreamSynchronize(s);
    cuStreamDestroy(s);
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 8; ++t) threads.emplace_back(worker, 1234 + t);
  for (auto& t : threads) t.join();

  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(refusals.load(), 0) << "the threads never reached the quota: the test proves nothing";
  EXPECT_LE(worst.load(), kQuota);
  // Everything charged came back (pools trimmed to what they held before).
  CUmemoryPool pool;
  cuDeviceGetDefaultMemPool(&pool, 0);
  cuMemPoolTrimTo(pool, 0);
  EXPECT_EQ(reported_free(), free_before);
}

}  // namespace
