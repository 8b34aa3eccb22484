// Simulated execution in one process: kernel durations, one kernel at a time per device, stream
// order (legacy, per-thread, non-blocking), events, capture and graph kernel nodes.
//
// Timing assertions are one-sided wherever possible (a sync cannot return before the simulated
// end), and stream-order checks use zero-time markers (event records) so they do not depend on
// how fast this machine runs. Checks of "not done yet" use kernels of 20 ms or more, so that
// only a stall of the test thread longer than that could make them pass for the wrong reason.
#include <thread>

#include "tests/fake_driver/cuda/sim_clock.h"
#include "tests/fake_driver/test/fake_driver_test.h"

namespace {

using fake_cuda::monotonic_ns;

constexpr long long kMs = 1'000'000;

class Timeline : public KernelTimeTest {
 protected:
  void SetUp() override {
    KernelTimeTest::SetUp();
    ASSERT_EQ(cuStreamCreate(&blocking_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamCreate(&non_blocking_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  }

  CUstream blocking_ = nullptr;
  CUstream non_blocking_ = nullptr;
};

TEST_F(Timeline, ASpinKernelOccupiesTheDeviceForItsTimeAndLaunchReturnsAtOnce) {
  const long long before = monotonic_ns();
  ASSERT_EQ(Launch(Kernel("spin_20000us"), blocking_), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(blocking_), CUDA_ERROR_NOT_READY);
  EXPECT_GE(fake_cuda_device_free_at_ns(0), before + 20 * kMs);
  ASSERT_EQ(cuStreamSynchronize(blocking_), CUDA_SUCCESS);
  EXPECT_GE(monotonic_ns() - before, 20 * kMs);
  EXPECT_EQ(cuStreamQuery(blocking_), CUDA_SUCCESS);
  EXPECT_EQ(fake_cuda_busy_ns(), 20'000'000u);
  EXPECT_EQ(fake_cuda_device_busy_ns(0), 20'000'000u);
  EXPECT_EQ(fake_cuda_device_kernels(0), 1u);
}

TEST_F(Timeline, OtherNamesTakeFakeCudaKernelUsWhichDefaultsToNothing) {
  ASSERT_EQ(Launch(Kernel("saxpy"), blocking_), CUDA_SUCCESS);
  for (const char* name : {"spin_5ms", "spin_us", "spin_-3us", "spin_3usx"}) {
    ASSERT_EQ(Launch(Kernel(name), blocking_), CUDA_SUCCESS) << name;
  }
  EXPECT_EQ(fake_cuda_busy_ns(), 0u);
  EXPECT_EQ(cuStreamQuery(blocking_), CUDA_SUCCESS);

  ScopedKnobs knobs({{"FAKE_CUDA_KERNEL_US", "3000"}});
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  UsePrimary();
  CUstream stream = nullptr;
  ASSERT_EQ(cuStreamCreate(&stream, 0), CUDA_SUCCESS);
  static const char image[] = "any bytes";
  ASSERT_EQ(cuModuleLoadData(&module_, image), CUDA_SUCCESS);
  ASSERT_EQ(Launch(Kernel("saxpy"), stream), CUDA_SUCCESS);
  ASSERT_EQ(Launch(Kernel("spin_1000us"), stream), CUDA_SUCCESS);
  EXPECT_EQ(fake_cuda_busy_ns(), 4'000'000u);
}

TEST_F(Timeline, TheDeviceRunsOneKernelAtATimeWhateverTheStream) {
  const long long before = monotonic_ns();
  ASSERT_EQ(Launch(Kernel("spin_4000us"), blocking_), CUDA_SUCCESS);
  ASSERT_EQ(Launch(Kernel("spin_4000us"), non_blocking_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(non_blocking_), CUDA_SUCCESS);
  EXPECT_GE(monotonic_ns() - before, 8 * kMs);
  EXPECT_EQ(cuStreamQuery(blocking_), CUDA_SUCCESS);  // it ended first
}

TEST_F(Timeline, AStreamRunsItsKernelsInOrder) {
  const long long before = monotonic_ns();
  CUfunction kernel = Kernel("spin_2000us");
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Launch(kernel, non_blocking_), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_GE(monotonic_ns() - before, 6 * kMs);
  EXPECT_EQ(fake_cuda_launch_count(), 3u);
}

TEST_F(Timeline, EventsCompleteWithTheWorkBeforeThemAndTimeItInMilliseconds) {
  CUevent unrecorded = nullptr;
  ASSERT_EQ(cuEventCreate(&unrecorded, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(unrecorded), CUDA_SUCCESS);  // as on the real driver

  // The first kernel holds the stream long enough that the second starts exactly when it ends,
  // unless this thread stalls for 20 ms: the measured time is then exactly the second kernel's.
  ASSERT_EQ(Launch(Kernel("spin_20000us"), blocking_), CUDA_SUCCESS);
  CUevent start = Marker(blocking_);
  ASSERT_EQ(Launch(Kernel("spin_3000us"), blocking_), CUDA_SUCCESS);
  CUevent end = nullptr;
  ASSERT_EQ(cuEventCreate(&end, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecordWithFlags(end, blocking_, CU_EVENT_RECORD_DEFAULT), CUDA_SUCCESS);
  EXPECT_EQ(cuEventRecordWithFlags(end, blocking_, 0x80), CUDA_ERROR_INVALID_VALUE);

  EXPECT_EQ(cuEventQuery(start), CUDA_ERROR_NOT_READY);
  float ms = -1;
  EXPECT_EQ(cuEventElapsedTime(&ms, start, end), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(cuEventSynchronize(end), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(end), CUDA_SUCCESS);
  ASSERT_EQ(cuEventElapsedTime_v2(&ms, start, end), CUDA_SUCCESS);
  EXPECT_NEAR(ms, 3.0f, 0.01f);
  ASSERT_EQ(cuEventElapsedTime(&ms, end, start), CUDA_SUCCESS);
  EXPECT_NEAR(ms, -3.0f, 0.01f);
}

TEST_F(Timeline, AnEventOnAnIdleStreamCompletesAtOnce) {
  CUevent event = Marker(blocking_);
  EXPECT_EQ(cuEventQuery(event), CUDA_SUCCESS);
  ASSERT_EQ(Launch(Kernel("spin_20000us"), non_blocking_), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(Marker(blocking_)), CUDA_SUCCESS);  // other streams do not hold it
}

TEST_F(Timeline, AStreamWaitingForAnEventHoldsItsLaterWork) {
  ASSERT_EQ(Launch(Kernel("spin_20000us"), non_blocking_), CUDA_SUCCESS);
  CUevent done = Marker(non_blocking_);
  CUstream waiter = nullptr, free_stream = nullptr;
  ASSERT_EQ(cuStreamCreate(&waiter, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&free_stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitEvent(waiter, done, 0), CUDA_SUCCESS);
  CUevent after_wait = Marker(waiter);
  EXPECT_EQ(cuEventQuery(after_wait), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuStreamQuery(waiter), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuEventQuery(Marker(free_stream)), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitEvent_ptsz(waiter, done, 0x40), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuStreamSynchronize(waiter), CUDA_SUCCESS);
  float ms = -1;
  ASSERT_EQ(cuEventElapsedTime(&ms, done, after_wait), CUDA_SUCCESS);
  EXPECT_EQ(ms, 0.0f);
}

TEST_F(Timeline, TheLegacyStreamWaitsForBlockingStreamsButNotForNonBlockingOnes) {
  ASSERT_EQ(Launch(Kernel("spin_20000us"), non_blocking_), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(Marker(nullptr)), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(CU_STREAM_LEGACY), CUDA_SUCCESS);

  ASSERT_EQ(Launch(Kernel("spin_20000us"), blocking_), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuEventQuery(Marker(CU_STREAM_LEGACY)), CUDA_ERROR_NOT_READY);
}

TEST_F(Timeline, BlockingStreamsWaitForTheLegacyStreamButNonBlockingOnesDoNot) {
  ASSERT_EQ(Launch(Kernel("spin_20000us"), nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(Marker(blocking_)), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuEventQuery(Marker(non_blocking_)), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(Marker(CU_STREAM_PER_THREAD)), CUDA_ERROR_NOT_READY);
}

TEST_F(Timeline, PerThreadStreamsAreBlockingAndOnePerThread) {
  // In a _ptsz call, stream 0 is the calling thread's per-thread stream.
  ASSERT_EQ(cuLaunchKernel_ptsz(Kernel("spin_20000us"), 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr,
                                nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery_ptsz(nullptr), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_ERROR_NOT_READY);  // legacy waits for blocking streams
  EXPECT_EQ(cuStreamQuery(non_blocking_), CUDA_SUCCESS);
  CUresult other_thread = CUDA_ERROR_UNKNOWN;
  std::thread([&] {
    cuCtxSetCurrent(ctx_);
    other_thread = cuStreamQuery_ptsz(nullptr);
  }).join();
  EXPECT_EQ(other_thread, CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize_ptsz(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_SUCCESS);
}

TEST_F(Timeline, ContextSynchronizeWaitsForEveryStreamEvenDestroyedOnes) {
  CUstream doomed = nullptr;
  ASSERT_EQ(cuStreamCreate(&doomed, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  const long long before = monotonic_ns();
  ASSERT_EQ(Launch(Kernel("spin_5000us"), doomed), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamDestroy_v2(doomed), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_GE(monotonic_ns() - before, 5 * kMs);
}

TEST_F(Timeline, AWaitingThreadDoesNotBlockTheOthers) {
  ASSERT_EQ(Launch(Kernel("spin_200000us"), blocking_), CUDA_SUCCESS);
  std::thread waiter([&] {
    cuCtxSetCurrent(ctx_);
    cuStreamSynchronize(blocking_);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let it start waiting
  const long long before = monotonic_ns();
  EXPECT_EQ(cuStreamQuery(blocking_), CUDA_ERROR_NOT_READY);
  EXPECT_LT(monotonic_ns() - before, 100 * kMs);  // not behind the waiter's 180 ms
  waiter.join();
  EXPECT_EQ(cuStreamQuery(blocking_), CUDA_SUCCESS);
}

TEST_F(Timeline, CapturedLaunchesRunOnlyWhenTheGraphIsLaunched) {
  ASSERT_EQ(cuStreamBeginCapture_v2(blocking_, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUfunction kernel = Kernel("spin_10000us");
  ASSERT_EQ(Launch(kernel, blocking_), CUDA_SUCCESS);
  ASSERT_EQ(Launch(kernel, blocking_), CUDA_SUCCESS);
  CUevent during = Marker(blocking_);  // accepted, not recorded
  EXPECT_EQ(fake_cuda_busy_ns(), 0u);
  EXPECT_EQ(fake_cuda_launch_count(), 0u);
  EXPECT_EQ(cuEventQuery(during), CUDA_SUCCESS);
  CUgraph graph = nullptr;
  ASSERT_EQ(cuStreamEndCapture(blocking_, &graph), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(blocking_), CUDA_SUCCESS);

  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  const long long before = monotonic_ns();
  ASSERT_EQ(cuGraphLaunch(exec, blocking_), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(blocking_), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(fake_cuda_busy_ns(), 20'000'000u);
  EXPECT_EQ(fake_cuda_device_kernels(0), 1u);  // a graph runs as one stretch of device time
  ASSERT_EQ(cuStreamSynchronize(blocking_), CUDA_SUCCESS);
  EXPECT_GE(monotonic_ns() - before, 20 * kMs);
}

TEST_F(Timeline, CaptureModeIsExchangedPerThread) {
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  ASSERT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_GLOBAL);
  CUstreamCaptureMode other_thread = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
  std::thread([&] { cuThreadExchangeStreamCaptureMode(&other_thread); }).join();
  EXPECT_EQ(other_thread, CU_STREAM_CAPTURE_MODE_GLOBAL);
  ASSERT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_RELAXED);
  mode = static_cast<CUstreamCaptureMode>(7);
  EXPECT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuThreadExchangeStreamCaptureMode(nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Timeline, KernelNodesRunBackToBackAndGraphsWithoutThemTakeNoTime) {
  CUgraph graph = nullptr;
  ASSERT_EQ(cuGraphCreate(&graph, 0), CUDA_SUCCESS);
  CUDA_KERNEL_NODE_PARAMS_v2 params = {};
  params.func = Kernel("spin_2000us");
  params.gridDimX = params.gridDimY = params.gridDimZ = 1;
  params.blockDimX = params.blockDimY = params.blockDimZ = 1;
  CUgraphNode first = nullptr, second = nullptr, third = nullptr;
  ASSERT_EQ(cuGraphAddKernelNode_v2(&first, graph, nullptr, 0, &params), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphAddKernelNode_v2(&second, graph, &first, 1, &params), CUDA_SUCCESS);
  CUDA_KERNEL_NODE_PARAMS_v1 legacy_params = {};
  legacy_params.func = Kernel("spin_1000us");
  ASSERT_EQ(cuGraphAddKernelNode(&third, graph, &second, 1, &legacy_params), CUDA_SUCCESS);
  params.func = reinterpret_cast<CUfunction>(0x40);
  EXPECT_EQ(cuGraphAddKernelNode_v2(&third, graph, nullptr, 0, &params), CUDA_ERROR_INVALID_HANDLE);

  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch_ptsz(exec, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fake_cuda_busy_ns(), 5'000'000u);

  CUgraph empty = nullptr;
  CUgraphExec empty_exec = nullptr;
  ASSERT_EQ(cuGraphCreate(&empty, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphInstantiateWithFlags(&empty_exec, empty, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(empty_exec, non_blocking_), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(non_blocking_), CUDA_SUCCESS);
  EXPECT_EQ(fake_cuda_device_kernels(0), 1u);
}

}  // namespace
