// Graph memory, stream capture, streams and events, modules and launches.
#include "tests/fake_driver/test/fake_driver_test.h"

namespace {

cuuint64_t GraphAttribute(CUgraphMem_attribute attribute) {
  cuuint64_t value = ~cuuint64_t{0};
  EXPECT_EQ(cuDeviceGetGraphMemAttribute(0, attribute, &value), CUDA_SUCCESS);
  return value;
}

class GraphsAndStreams : public FakeDriverTest {
 protected:
  void SetUp() override {
    FakeDriverTest::SetUp();
    UsePrimary();
    ASSERT_EQ(cuStreamCreate(&stream_, 0), CUDA_SUCCESS);
  }

  // A graph of one allocation node of `bytes` on device 0 and its free node.
  CUgraph AllocatingGraph(size_t bytes) {
    CUgraph graph = nullptr;
    EXPECT_EQ(cuGraphCreate(&graph, 0), CUDA_SUCCESS);
    CUDA_MEM_ALLOC_NODE_PARAMS params = {};
    params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    params.poolProps.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    params.bytesize = bytes;
    CUgraphNode alloc = nullptr, free_node = nullptr;
    EXPECT_EQ(cuGraphAddMemAllocNode(&alloc, graph, nullptr, 0, &params), CUDA_SUCCESS);
    EXPECT_NE(params.dptr, 0u);
    EXPECT_EQ(cuGraphAddMemFreeNode(&free_node, graph, &alloc, 1, params.dptr), CUDA_SUCCESS);
    return graph;
  }

  CUstream stream_ = nullptr;
};

TEST_F(GraphsAndStreams, GraphMemoryIsReservedAtFirstLaunchAndKeptUntilTrim) {
  CUgraph graph = AllocatingGraph(3 * kMiB);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_GRAPH), 0u);
  ASSERT_EQ(cuGraphLaunch(exec, stream_), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_GRAPH), 4 * kMiB);
  ASSERT_EQ(cuGraphLaunch_ptsz(exec, stream_), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_GRAPH), 4 * kMiB);
  EXPECT_EQ(GraphAttribute(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 4 * kMiB);
  EXPECT_EQ(GraphAttribute(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 4 * kMiB);
  ASSERT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphDestroy(graph), CUDA_SUCCESS);
  EXPECT_EQ(GraphAttribute(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 0u);
  EXPECT_EQ(GraphAttribute(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 4 * kMiB);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_GRAPH), 4 * kMiB);
  ASSERT_EQ(cuDeviceGraphMemTrim(0), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_GRAPH), 0u);
  EXPECT_EQ(GraphAttribute(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH), 4 * kMiB);
  EXPECT_EQ(GraphAttribute(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH), 4 * kMiB);
}

TEST_F(GraphsAndStreams, IdleGraphReserveIsReusedBeforeChargingMore) {
  CUgraphExec first = nullptr, second = nullptr;
  cuGraphInstantiateWithFlags(&first, AllocatingGraph(4 * kMiB), 0);
  cuGraphLaunch(first, stream_);
  cuGraphExecDestroy(first);
  cuGraphInstantiateWithFlags(&second, AllocatingGraph(6 * kMiB), 0);
  ASSERT_EQ(cuGraphLaunch(second, stream_), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_GRAPH), 6 * kMiB);
}

TEST_F(GraphsAndStreams, GraphMemoryBeyondTheDeviceFailsAtLaunch) {
  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&exec, AllocatingGraph(16 * kGiB), 0), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphLaunch(exec, stream_), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_GRAPH), 0u);
}

TEST_F(GraphsAndStreams, AllocationsDuringCaptureBecomeGraphMemory) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  ASSERT_EQ(cuStreamIsCapturing(stream_, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_EQ(cuStreamBeginCapture_v2(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamIsCapturing_ptsz(stream_, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CUdeviceptr ptr = 0;
  ASSERT_EQ(cuMemAllocAsync(&ptr, 5 * kMiB, stream_), CUDA_SUCCESS);
  EXPECT_NE(ptr, 0u);
  ASSERT_EQ(cuMemFreeAsync(ptr, stream_), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(stream_), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_POOL_RESERVE), 0u);
  CUgraph graph = nullptr;
  ASSERT_EQ(cuStreamEndCapture(stream_, &graph), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamEndCapture(stream_, &graph), CUDA_ERROR_ILLEGAL_STATE);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, stream_), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_GRAPH), 6 * kMiB);
}

TEST_F(GraphsAndStreams, SpecialStreamsCannotBeCaptured) {
  EXPECT_EQ(cuStreamBeginCapture_v2(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamBeginCapture_v2_ptsz(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
}

TEST_F(GraphsAndStreams, StreamsAndEvents) {
  CUstream prioritized = nullptr;
  ASSERT_EQ(cuStreamCreateWithPriority(&prioritized, CU_STREAM_NON_BLOCKING, -1), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(prioritized), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery_ptsz(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize_ptsz(nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamDestroy_v2(prioritized), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(prioritized), CUDA_ERROR_INVALID_HANDLE);

  CUevent start = nullptr, end = nullptr, untimed = nullptr;
  ASSERT_EQ(cuEventCreate(&start, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&end, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  float ms = -1;
  EXPECT_EQ(cuEventElapsedTime_v2(&ms, start, end), CUDA_ERROR_INVALID_HANDLE);  // not recorded
  ASSERT_EQ(cuEventRecord(start, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord_ptsz(end, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(untimed, stream_), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(end), CUDA_SUCCESS);
  ASSERT_EQ(cuEventElapsedTime(&ms, start, end), CUDA_SUCCESS);
  EXPECT_GE(ms, 0.0f);
  EXPECT_EQ(cuEventElapsedTime_v2(&ms, start, untimed), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(cuEventDestroy_v2(end), CUDA_SUCCESS);
  EXPECT_EQ(cuEventSynchronize(end), CUDA_ERROR_INVALID_HANDLE);
}

class Kernels : public FakeDriverTest {
 protected:
  void SetUp() override {
    FakeDriverTest::SetUp();
    UsePrimary();
    static const char image[] = "any bytes";
    ASSERT_EQ(cuModuleLoadData(&module_, image), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleGetFunction(&kernel_, module_, "saxpy"), CUDA_SUCCESS);
  }
  CUmodule module_ = nullptr;
  CUfunction kernel_ = nullptr;
};

TEST_F(Kernels, EveryLaunchEntryPointRunsAndIsCounted) {
  void* params[] = {nullptr};
  EXPECT_EQ(cuLaunchKernel(kernel_, 2, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernel_ptsz(kernel_, 2, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr),
            CUDA_SUCCESS);
  CUlaunchConfig config = {};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 256;
  config.blockDimY = config.blockDimZ = 1;
  EXPECT_EQ(cuLaunchKernelEx(&config, kernel_, params, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernelEx_ptsz(&config, kernel_, params, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchCooperativeKernel(kernel_, 1, 1, 1, 32, 1, 1, 0, nullptr, params),
            CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchCooperativeKernel_ptsz(kernel_, 1, 1, 1, 32, 1, 1, 0, nullptr, params),
            CUDA_SUCCESS);
  EXPECT_EQ(fake_cuda_launch_count(), 6u);
}

TEST_F(Kernels, InvalidLaunchesAreRefusedAndNotCounted) {
  EXPECT_EQ(cuLaunchKernel(kernel_, 0, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(kernel_, 1, 1, 1, 1025, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  void* params[] = {nullptr};
  void* extra[] = {CU_LAUNCH_PARAM_END};
  EXPECT_EQ(cuLaunchKernel(kernel_, 1, 1, 1, 1, 1, 1, 0, nullptr, params, extra),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernelEx(nullptr, kernel_, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(reinterpret_cast<CUfunction>(0x40), 1, 1, 1, 1, 1, 1, 0, nullptr,
                           nullptr, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(cuModuleUnload(module_), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernel(kernel_, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(fake_cuda_launch_count(), 0u);
}

TEST_F(Kernels, LaunchOnTheNullStreamNeedsACurrentContext) {
  ASSERT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernel(kernel_, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_CONTEXT);
}

}  // namespace
