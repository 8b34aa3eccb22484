// Pinned host memory and the stream memory operations on it (cuStreamWaitValue32_v2,
// cuStreamWriteValue32_v2): what the hook's parking uses to hold launches back on the GPU.
//
// Timing assertions are one-sided: work held behind a closed wait is checked to be "not done"
// (with kernels of 20 ms or more, so only a stall of the test thread that long could fake it),
// and to be done "no sooner than its duration after the word was opened"; upper bounds are
// generous deadlines (kPatience) that only catch a wait that never passes.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "tests/fake_driver/cuda/sim_clock.h"
#include "tests/fake_driver/test/fake_driver_test.h"

namespace {

using fake_cuda::monotonic_ns;

constexpr long long kMs = 1'000'000;
constexpr long long kPatience = 5'000 * kMs;

class StreamMemoryOps : public KernelTimeTest {
 protected:
  void SetUp() override {
    KernelTimeTest::SetUp();
    ASSERT_EQ(cuStreamCreate(&stream_, 0), CUDA_SUCCESS);
    void* host = nullptr;
    ASSERT_EQ(cuMemHostAlloc(&host, 64, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP),
              CUDA_SUCCESS);
    words_ = static_cast<std::uint32_t*>(host);
    ASSERT_EQ(cuMemHostGetDevicePointer_v2(&dwords_, host, 0), CUDA_SUCCESS);
  }

  // Word i as the GPU sees it, and as another thread or process stores it.
  CUdeviceptr Address(int i = 0) const { return dwords_ + static_cast<CUdeviceptr>(i) * 4; }
  std::uint32_t Load(int i = 0) { return std::atomic_ref<std::uint32_t>(words_[i]).load(); }
  void Store(std::uint32_t value, int i = 0) { std::atomic_ref<std::uint32_t>(words_[i]).store(value); }

  // Polls cuEventQuery until the event completes or kPatience passes; whether it completed.
  static bool CompletesSoon(CUevent event) {
    const long long until = monotonic_ns() + kPatience;
    while (monotonic_ns() < until) {
      const CUresult rc = cuEventQuery(event);
      if (rc == CUDA_SUCCESS) return true;
      EXPECT_EQ(rc, CUDA_ERROR_NOT_READY);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return false;
  }

  CUstream stream_ = nullptr;
  std::uint32_t* words_ = nullptr;
  CUdeviceptr dwords_ = 0;
};

TEST_F(StreamMemoryOps, HostAllocIsZeroedAlignedMappedAtItsOwnAddressAndCostsTheDeviceNothing) {
  const size_t used = Used();
  void* p = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&p, 1000, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                                          CU_MEMHOSTALLOC_WRITECOMBINED),
            CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u);
  const auto* bytes = static_cast<const unsigned char*>(p);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(bytes[i], 0) << i;
  EXPECT_EQ(Used(), used);

  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemHostGetDevicePointer_v2(&d, p, 0), CUDA_SUCCESS);
  EXPECT_EQ(d, reinterpret_cast<CUdeviceptr>(p));
  ASSERT_EQ(cuMemHostGetDevicePointer_v2(&d, static_cast<char*>(p) + 999, 0), CUDA_SUCCESS);
  EXPECT_EQ(d, reinterpret_cast<CUdeviceptr>(p) + 999);
  EXPECT_EQ(cuMemHostGetDevicePointer_v2(&d, static_cast<char*>(p) + 1000, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemHostGetDevicePointer_v2(&d, p, 1), CUDA_ERROR_INVALID_VALUE);
  int on_stack = 0;
  EXPECT_EQ(cuMemHostGetDevicePointer_v2(&d, &on_stack, 0), CUDA_ERROR_INVALID_VALUE);

  EXPECT_EQ(cuMemHostAlloc(&p, 64, 0x80), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeHost(static_cast<char*>(p) + 8), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemFreeHost(p), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeHost(p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemHostGetDevicePointer_v2(&d, p, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(StreamMemoryOps, HostAllocNeedsACurrentContext) {
  ASSERT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  void* p = nullptr;
  EXPECT_EQ(cuMemHostAlloc(&p, 64, 0), CUDA_ERROR_INVALID_CONTEXT);
}

// Pinned host memory belongs to the context it was made in, PORTABLE or not: it goes with a
// primary context's reset, as on the real driver (cuCtxDestroy frees cuMemAllocHost memory).
TEST_F(StreamMemoryOps, HostAllocGoesWithItsContext) {
  void* p = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&p, 64, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxReset_v2(0), CUDA_SUCCESS);
  ctx_ = UsePrimary();
  CUdeviceptr d = 0;
  EXPECT_EQ(cuMemHostGetDevicePointer_v2(&d, p, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeHost(p), CUDA_ERROR_INVALID_VALUE);
}

// Registered memory is the caller's: pinned while its context lives, and usable by stream
// memory operations at its own address; the registration (not the memory) goes with the context.
TEST_F(StreamMemoryOps, RegisteredMemoryIsMappedUntilUnregisteredOrItsContextGoes) {
  alignas(64) static std::uint32_t words[16];
  ASSERT_EQ(cuMemHostRegister_v2(words, sizeof words, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP),
            CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostRegister_v2(&words[4], 4, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemHostGetDevicePointer_v2(&d, &words[3], 0), CUDA_SUCCESS);
  EXPECT_EQ(d, reinterpret_cast<CUdeviceptr>(&words[3]));
  ASSERT_EQ(cuStreamWriteValue32_v2(stream_, d, 7, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(std::atomic_ref<std::uint32_t>(words[3]).load(), 7u);
  EXPECT_EQ(cuMemFreeHost(words), CUDA_ERROR_INVALID_VALUE);  // not the driver's to free
  ASSERT_EQ(cuMemHostUnregister(words), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostUnregister(words), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  EXPECT_EQ(cuMemHostGetDevicePointer_v2(&d, words, 0), CUDA_ERROR_INVALID_VALUE);

  ASSERT_EQ(cuMemHostRegister_v2(words, sizeof words, CU_MEMHOSTREGISTER_PORTABLE), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxReset_v2(0), CUDA_SUCCESS);
  ctx_ = UsePrimary();
  EXPECT_EQ(cuMemHostGetDevicePointer_v2(&d, words, 0), CUDA_ERROR_INVALID_VALUE);
  words[0] = 1;  // still the caller's memory
  ASSERT_EQ(cuMemHostRegister_v2(words, sizeof words, CU_MEMHOSTREGISTER_PORTABLE), CUDA_SUCCESS);
  ASSERT_EQ(cuMemHostUnregister(words), CUDA_SUCCESS);
}

// A copy to pageable memory completes inside the call, after the stream's work before it, and
// holds the driver meanwhile: here the word is opened by another thread with no driver call.
TEST_F(StreamMemoryOps, ACopyToPageableMemoryWaitsInTheCallForHeldWork) {
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc_v2(&d, 64), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitValue32_v2(stream_, Address(), 1, CU_STREAM_WAIT_VALUE_GEQ), CUDA_SUCCESS);
  ASSERT_EQ(Launch(Kernel("spin_20000us"), stream_), CUDA_SUCCESS);
  std::thread opener([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    Store(1);
  });
  const long long before = monotonic_ns();
  char pageable[64];
  EXPECT_EQ(cuMemcpyDtoHAsync_v2(pageable, d, sizeof pageable, stream_), CUDA_SUCCESS);
  const long long took = monotonic_ns() - before;
  opener.join();
  EXPECT_GE(took, 30 * kMs + 20 * kMs);
  EXPECT_LT(took, kPatience);
  // To pinned memory it is queued: the call returns at once, work before it or not.
  ASSERT_EQ(Launch(Kernel("spin_20000us"), stream_), CUDA_SUCCESS);
  const long long queued = monotonic_ns();
  EXPECT_EQ(cuMemcpyDtoHAsync_v2(words_, d, 4, stream_), CUDA_SUCCESS);
  EXPECT_LT(monotonic_ns() - queued, 15 * kMs);
  EXPECT_EQ(cuMemcpyDtoHAsync_v2(pageable, d + 60, 8, stream_), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(StreamMemoryOps, AKernelBehindAClosedWaitRunsOnlyOnceAnotherThreadOpensTheWord) {
  ASSERT_EQ(cuStreamWaitValue32_v2(stream_, Address(), 1, CU_STREAM_WAIT_VALUE_GEQ), CUDA_SUCCESS);
  ASSERT_EQ(Launch(Kernel("spin_20000us"), stream_), CUDA_SUCCESS);
  CUevent done = Marker(stream_);
  // Nothing blocked the launching thread: the word is still closed.
  EXPECT_EQ(Load(), 0u);

  // Long after the kernel would have ended, it has not run.
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuEventQuery(done), CUDA_ERROR_NOT_READY);

  long long opened = 0;
  std::thread opener([&] {
    opened = monotonic_ns();
    Store(1);
  });
  opener.join();
  ASSERT_TRUE(CompletesSoon(done));
  EXPECT_GE(monotonic_ns() - opened, 20 * kMs);
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_SUCCESS);
}

TEST_F(StreamMemoryOps, StreamSynchronizeOnABlockedStreamReturnsOnceAnotherThreadOpensTheWord) {
  ASSERT_EQ(cuStreamWaitValue32_v2(stream_, Address(), 5, CU_STREAM_WAIT_VALUE_GEQ | CU_STREAM_WAIT_VALUE_FLUSH),
            CUDA_SUCCESS);
  ASSERT_EQ(Launch(Kernel("spin_10000us"), stream_), CUDA_SUCCESS);
  std::atomic<long long> opened{0};
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    opened = monotonic_ns();
    Store(5);
  });
  const long long before = monotonic_ns();
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  const long long after = monotonic_ns();
  opener.join();
  ASSERT_NE(opened.load(), 0);
  EXPECT_GE(after - opened.load(), 10 * kMs);
  EXPECT_GE(after - before, 60 * kMs);
  EXPECT_LT(after - before, kPatience);
}

TEST_F(StreamMemoryOps, EventAndContextSynchronizeWaitForTheWordToo) {
  ASSERT_EQ(cuStreamWaitValue32_v2(stream_, Address(), 1, CU_STREAM_WAIT_VALUE_EQ), CUDA_SUCCESS);
  CUevent done = Marker(stream_);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    Store(1);
  });
  ASSERT_EQ(cuEventSynchronize(done), CUDA_SUCCESS);
  EXPECT_EQ(Load(), 1u);
  opener.join();

  ASSERT_EQ(cuStreamWaitValue32_v2(stream_, Address(), 2, CU_STREAM_WAIT_VALUE_EQ), CUDA_SUCCESS);
  ASSERT_EQ(Launch(Kernel("spin_1000us"), stream_), CUDA_SUCCESS);
  std::thread opener2([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    Store(2);
  });
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(Load(), 2u);
  opener2.join();
}

TEST_F(StreamMemoryOps, AWriteAfterAKernelLandsOnlyAtTheKernelsSimulatedEnd) {
  const long long before = monotonic_ns();
  ASSERT_EQ(Launch(Kernel("spin_30000us"), stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWriteValue32_v2(stream_, Address(), 7, CU_STREAM_WRITE_VALUE_DEFAULT),
            CUDA_SUCCESS);
  EXPECT_EQ(Load(), 0u);
  // Watched without entering the driver, as the hook's monitor reads it.
  while (Load() != 7u && monotonic_ns() - before < kPatience) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const long long seen = monotonic_ns();
  ASSERT_EQ(Load(), 7u);
  EXPECT_GE(seen - before, 30 * kMs);

  // On an idle stream the write lands at once.
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWriteValue32_v2(stream_, Address(1), 9, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER),
            CUDA_SUCCESS);
  EXPECT_EQ(Load(1), 9u);
}

TEST_F(StreamMemoryOps, AWriteBehindAWaitLandsAfterTheWaitPassesAndTheWorkBeforeItEnds) {
  // The hook's gate: a write saying "reached", then a wait; later work writes again.
  ASSERT_EQ(cuStreamWaitValue32_v2(stream_, Address(0), 1, CU_STREAM_WAIT_VALUE_GEQ), CUDA_SUCCESS);
  ASSERT_EQ(Launch(Kernel("spin_20000us"), stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWriteValue32_v2(stream_, Address(1), 1, 0), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(Load(1), 0u);
  const long long opened = monotonic_ns();
  Store(1, 0);
  while (Load(1) != 1u && monotonic_ns() - opened < kPatience) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  ASSERT_EQ(Load(1), 1u);
  EXPECT_GE(monotonic_ns() - opened, 20 * kMs);
}

TEST_F(StreamMemoryOps, GeqComparesCyclically) {
  // 5 is "after" 0xfffffffb: (int32_t)(5 - 0xfffffffb) = 10 >= 0, so the wait passes at once.
  Store(5);
  ASSERT_EQ(cuStreamWaitValue32_v2(stream_, Address(), 0xfffffffbu, CU_STREAM_WAIT_VALUE_GEQ),
            CUDA_SUCCESS);
  EXPECT_TRUE(CompletesSoon(Marker(stream_)));

  // 0xfffffff0 is "before" 0x10: closed until the word wraps past it.
  Store(0xfffffff0u);
  ASSERT_EQ(cuStreamWaitValue32_v2(stream_, Address(), 0x10, CU_STREAM_WAIT_VALUE_GEQ), CUDA_SUCCESS);
  CUevent done = Marker(stream_);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(cuEventQuery(done), CUDA_ERROR_NOT_READY);
  Store(0xffffffffu);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(cuEventQuery(done), CUDA_ERROR_NOT_READY);
  Store(0x10);
  EXPECT_TRUE(CompletesSoon(done));
}

TEST_F(StreamMemoryOps, EqAndAndNorConditions) {
  struct Case {
    unsigned int condition;
    std::uint32_t value, closed, open;
  };
  const Case cases[] = {
      {CU_STREAM_WAIT_VALUE_EQ, 4, 3, 4},
      {CU_STREAM_WAIT_VALUE_AND, 0b100, 0b011, 0b110},
      {CU_STREAM_WAIT_VALUE_NOR, 0xffff0000u, 0x0000ffffu, 0x0000fffeu},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.condition);
    Store(c.closed);
    ASSERT_EQ(cuStreamWaitValue32_v2(stream_, Address(), c.value, c.condition), CUDA_SUCCESS);
    CUevent done = Marker(stream_);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(cuEventQuery(done), CUDA_ERROR_NOT_READY);
    EXPECT_EQ(cuStreamQuery(stream_), CUDA_ERROR_NOT_READY);
    Store(c.open);
    EXPECT_TRUE(CompletesSoon(done));
  }
}

TEST_F(StreamMemoryOps, AWaitOnAnEventHeldBehindAWaitHoldsTheOtherStream) {
  CUstream other = nullptr;
  ASSERT_EQ(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitValue32_v2(stream_, Address(), 1, CU_STREAM_WAIT_VALUE_GEQ), CUDA_SUCCESS);
  CUevent gate = Marker(stream_);
  ASSERT_EQ(cuStreamWaitEvent(other, gate, 0), CUDA_SUCCESS);
  ASSERT_EQ(Launch(Kernel("spin_1000us"), other), CUDA_SUCCESS);
  CUevent done = Marker(other);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(cuStreamQuery(other), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuEventQuery(done), CUDA_ERROR_NOT_READY);
  Store(1);
  EXPECT_TRUE(CompletesSoon(done));
}

TEST_F(StreamMemoryOps, TheLegacyAndPerThreadStreamsBlockToo) {
  ASSERT_EQ(cuStreamWaitValue32_v2(nullptr, Address(0), 1, CU_STREAM_WAIT_VALUE_GEQ), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitValue32_v2_ptsz(nullptr, Address(1), 1, CU_STREAM_WAIT_VALUE_GEQ),
            CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWriteValue32_v2_ptsz(nullptr, Address(2), 3, 0), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(Load(2), 0u);
  Store(1, 1);
  ASSERT_EQ(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT_EQ(Load(2), 3u);
  // The per-thread stream is a blocking stream: the legacy stream still waits for the word 0.
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_ERROR_NOT_READY);
  Store(1, 0);
  ASSERT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_SUCCESS);
}

TEST_F(StreamMemoryOps, WorkOfADestroyedBlockedStreamStillRuns) {
  ASSERT_EQ(cuStreamWaitValue32_v2(stream_, Address(0), 1, CU_STREAM_WAIT_VALUE_GEQ), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWriteValue32_v2(stream_, Address(1), 2, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamDestroy_v2(stream_), CUDA_SUCCESS);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    Store(1);
  });
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  opener.join();
  EXPECT_EQ(Load(1), 2u);
}

TEST_F(StreamMemoryOps, BadArgumentsAndCapture) {
  EXPECT_EQ(cuStreamWaitValue32_v2(stream_, Address(), 1, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamWriteValue32_v2(stream_, Address(), 1, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamWaitValue32_v2(stream_, Address() + 2, 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamWriteValue32_v2(stream_, Address(16), 1, 0), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr device = 0;
  ASSERT_EQ(cuMemAlloc_v2(&device, 4096), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWriteValue32_v2(stream_, device, 1, 0), CUDA_ERROR_INVALID_VALUE);

  ASSERT_EQ(cuStreamBeginCapture_v2(stream_, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitValue32_v2(stream_, Address(), 1, 0), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamWriteValue32_v2(stream_, Address(), 1, 0), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph graph = nullptr;
  ASSERT_EQ(cuStreamEndCapture(stream_, &graph), CUDA_SUCCESS);
  EXPECT_EQ(Load(), 0u);
}

}  // namespace
