// The contents of device memory: copies and sets move bytes through cuMemAlloc memory and VMM
// mappings, VMM memory that is unmapped and released loses them, the copy-time knob
// (FAKE_CUDA_COPY_MS_PER_GIB) and the fault knob (FAKE_CUDA_FAULT_ON_UNMAPPED). What a hook that
// suspends a process by moving its VMM chunks to host memory and back relies on.
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "tests/fake_driver/cuda/sim_clock.h"
#include "tests/fake_driver/test/fake_driver_test.h"

namespace {

using fake_cuda::monotonic_ns;

constexpr long long kMs = 1'000'000;

// Bytes that differ from one position to the next (and from zero), seeded per use.
std::vector<unsigned char> Pattern(size_t bytes, unsigned seed) {
  std::vector<unsigned char> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<unsigned char>((i * 131 + seed * 7 + 1) % 251 + 1);
  return data;
}

std::vector<unsigned char> Read(CUdeviceptr src, size_t bytes) {
  std::vector<unsigned char> data(bytes, 0xee);
  EXPECT_EQ(cuMemcpyDtoH_v2(data.data(), src, bytes), CUDA_SUCCESS);
  return data;
}

bool AllEqual(const std::vector<unsigned char>& data, unsigned char value) {
  return std::all_of(data.begin(), data.end(), [&](unsigned char b) { return b == value; });
}

CUmemAllocationProp DeviceProp(int dev = 0) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, dev};
  return prop;
}

CUresult GrantAccess(CUdeviceptr va, size_t size,
                     CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
  CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, flags};
  return cuMemSetAccess(va, size, &access, 1);
}

CUmemGenericAllocationHandle Create(size_t size) {
  const CUmemAllocationProp prop = DeviceProp();
  CUmemGenericAllocationHandle handle = 0;
  EXPECT_EQ(cuMemCreate(&handle, size, &prop, 0), CUDA_SUCCESS);
  return handle;
}

class DeviceData : public FakeDriverTest {
 protected:
  void SetUp() override {
    FakeDriverTest::SetUp();
    UsePrimary();
  }
};

TEST_F(DeviceData, BytesRoundTripThroughAnAllocation) {
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc_v2(&d, 3 * kMiB + 5), CUDA_SUCCESS);
  EXPECT_TRUE(AllEqual(Read(d, 3 * kMiB + 5), 0));  // fresh memory reads as zeros
  const auto data = Pattern(3 * kMiB + 5, 1);
  ASSERT_EQ(cuMemcpyHtoD_v2(d, data.data(), data.size()), CUDA_SUCCESS);
  EXPECT_EQ(Read(d, data.size()), data);
  // An interior range, and device-to-device into a second allocation.
  std::vector<unsigned char> middle(1000);
  ASSERT_EQ(cuMemcpyDtoH_v2(middle.data(), d + 12345, middle.size()), CUDA_SUCCESS);
  EXPECT_TRUE(std::equal(middle.begin(), middle.end(), data.begin() + 12345));
  CUdeviceptr e = 0;
  ASSERT_EQ(cuMemAlloc_v2(&e, data.size()), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoD_v2(e, d, data.size()), CUDA_SUCCESS);
  EXPECT_EQ(Read(e, data.size()), data);
  // A freed allocation's bytes go with it: the next one starts from zeros.
  ASSERT_EQ(cuMemFree_v2(d), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyDtoH_v2(middle.data(), d, middle.size()), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemAlloc_v2(&d, data.size()), CUDA_SUCCESS);
  EXPECT_TRUE(AllEqual(Read(d, data.size()), 0));
}

TEST_F(DeviceData, PitchedAllocationsHoldBytesToo) {
  CUdeviceptr d = 0;
  size_t pitch = 0;
  ASSERT_EQ(cuMemAllocPitch_v2(&d, &pitch, 1000, 64, 4), CUDA_SUCCESS);
  const auto data = Pattern(pitch * 64, 2);
  ASSERT_EQ(cuMemcpyHtoD_v2(d, data.data(), data.size()), CUDA_SUCCESS);
  EXPECT_EQ(Read(d, data.size()), data);
}

TEST_F(DeviceData, SetsFillBytesAndWords) {
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc_v2(&d, 256 * 1024), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8_v2(d, 0xab, 256 * 1024), CUDA_SUCCESS);
  EXPECT_TRUE(AllEqual(Read(d, 256 * 1024), 0xab));
  ASSERT_EQ(cuMemsetD32_v2(d + 4, 0x11223344u, 1000), CUDA_SUCCESS);
  const auto bytes = Read(d, 4008);
  EXPECT_EQ(bytes[3], 0xab);
  for (size_t i = 4; i < 4004; i += 4) {
    std::uint32_t word = 0;
    std::memcpy(&word, &bytes[i], 4);
    ASSERT_EQ(word, 0x11223344u) << "at " << i;
  }
  EXPECT_EQ(bytes[4004], 0xab);
  EXPECT_EQ(cuMemsetD32_v2(d + 2, 0, 1), CUDA_ERROR_INVALID_VALUE);  // words are aligned
  ASSERT_EQ(cuMemsetD8_v2(d, 0, 256 * 1024), CUDA_SUCCESS);
  EXPECT_TRUE(AllEqual(Read(d, 256 * 1024), 0));
}

TEST_F(DeviceData, UnifiedCopiesTellHostFromDeviceByTheAddress) {
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAlloc_v2(&a, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc_v2(&b, 4096), CUDA_SUCCESS);
  const auto data = Pattern(4096, 3);
  std::vector<unsigned char> back(4096), host_copy(4096);
  const auto host = [](const void* p) { return reinterpret_cast<CUdeviceptr>(p); };
  ASSERT_EQ(cuMemcpy(a, host(data.data()), 4096), CUDA_SUCCESS);           // H -> D
  ASSERT_EQ(cuMemcpy(b, a, 4096), CUDA_SUCCESS);                           // D -> D
  ASSERT_EQ(cuMemcpy(host(back.data()), b, 4096), CUDA_SUCCESS);          // D -> H
  EXPECT_EQ(back, data);
  ASSERT_EQ(cuMemcpy(host(host_copy.data()), host(back.data()), 4096), CUDA_SUCCESS);  // H -> H
  EXPECT_EQ(host_copy, data);
  EXPECT_EQ(cuMemcpy(a + 1, host(data.data()), 4096), CUDA_ERROR_INVALID_VALUE);  // past the end
  // The per-thread twins and the asynchronous forms, on a stream.
  CUstream stream = nullptr;
  ASSERT_EQ(cuStreamCreate(&stream, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8Async(b, 0, 4096, stream), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyAsync(b + 16, a + 16, 100, stream), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  std::vector<unsigned char> expected(4096, 0);
  std::copy(data.begin() + 16, data.begin() + 116, expected.begin() + 16);
  EXPECT_EQ(Read(b, 4096), expected);
  ASSERT_EQ(cuMemsetD32Async_ptsz(b, 0x01010101u, 1024, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoDAsync_v2_ptsz(a, b, 4096, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpy_ptds(host(back.data()), a, 4096), CUDA_SUCCESS);
  EXPECT_TRUE(AllEqual(back, 0x01));
  ASSERT_EQ(cuMemcpyHtoD_v2_ptds(a, data.data(), 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoD_v2_ptds(b, a, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8_v2_ptds(b + 4000, 7, 96), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD32_v2_ptds(b + 3996, 9, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2_ptds(back.data(), b, 4096), CUDA_SUCCESS);
  EXPECT_TRUE(std::equal(back.begin(), back.begin() + 3996, data.begin()));
  EXPECT_EQ(back[3996], 9);
  EXPECT_EQ(back[3999], 0);
  EXPECT_EQ(back[4000], 7);
}

TEST_F(DeviceData, AsyncCopiesToPinnedMemoryCompleteBySynchronisation) {
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc_v2(&d, kMiB), CUDA_SUCCESS);
  void* pinned = nullptr;
  ASSERT_EQ(cuMemAllocHost_v2(&pinned, kMiB), CUDA_SUCCESS);
  void* mapped = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&mapped, kMiB, CU_MEMHOSTALLOC_PORTABLE), CUDA_SUCCESS);
  const auto data = Pattern(kMiB, 4);
  std::memcpy(pinned, data.data(), kMiB);
  CUstream stream = nullptr;
  ASSERT_EQ(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync_v2(d, pinned, kMiB, stream), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoHAsync_v2(mapped, d, kMiB, stream), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(mapped, data.data(), kMiB), 0);
  // Per-thread stream, and to pageable memory (completes inside the call).
  std::memset(mapped, 0, kMiB);
  ASSERT_EQ(cuMemcpyDtoHAsync_v2_ptsz(mapped, d, kMiB, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize_ptsz(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(mapped, data.data(), kMiB), 0);
  std::vector<unsigned char> pageable(kMiB);
  ASSERT_EQ(cuMemcpyDtoHAsync_v2(pageable.data(), d, kMiB, stream), CUDA_SUCCESS);
  EXPECT_EQ(pageable, data);
  ASSERT_EQ(cuMemsetD8Async(d, 0, kMiB, stream), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync_v2_ptsz(d, data.data(), 10, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(Read(d, 10), std::vector<unsigned char>(data.begin(), data.begin() + 10));
}

TEST_F(DeviceData, PoolAllocationsHoldBytes) {
  CUstream stream = nullptr;
  ASSERT_EQ(cuStreamCreate(&stream, 0), CUDA_SUCCESS);
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAllocAsync(&d, 5000, stream), CUDA_SUCCESS);
  const auto data = Pattern(5000, 9);
  ASSERT_EQ(cuMemcpyHtoDAsync_v2(d, data.data(), data.size(), stream), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(Read(d, data.size()), data);
  ASSERT_EQ(cuMemFreeAsync(d, stream), CUDA_SUCCESS);
  EXPECT_EQ(cuMemsetD8Async(d, 0, 1, stream), CUDA_ERROR_INVALID_VALUE);
}

class VmmData : public DeviceData {
 protected:
  // Reserves 2 chunks and maps two physical chunks side by side, readable and writable.
  void MapTwoChunks() {
    ASSERT_EQ(cuMemAddressReserve(&va_, 2 * kChunk, 0, 0, 0), CUDA_SUCCESS);
    first_ = Create(kChunk);
    second_ = Create(kChunk);
    ASSERT_EQ(cuMemMap(va_, kChunk, 0, first_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuMemMap(va_ + kChunk, kChunk, 0, second_, 0), CUDA_SUCCESS);
    ASSERT_EQ(GrantAccess(va_, 2 * kChunk), CUDA_SUCCESS);  // one call over both mappings
  }

  CUdeviceptr va_ = 0;
  CUmemGenericAllocationHandle first_ = 0, second_ = 0;
};

TEST_F(VmmData, ACopySpansChunksMappedSideBySide) {
  MapTwoChunks();
  const auto data = Pattern(kChunk, 5);  // straddles the boundary between the two chunks
  ASSERT_EQ(cuMemcpyHtoD_v2(va_ + kChunk / 2, data.data(), data.size()), CUDA_SUCCESS);
  EXPECT_EQ(Read(va_ + kChunk / 2, data.size()), data);
  // Each physical chunk holds its part: mapped alone elsewhere, the second shows the tail.
  CUdeviceptr other = 0;
  ASSERT_EQ(cuMemAddressReserve(&other, kChunk, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(other, kChunk, 0, second_, 0), CUDA_SUCCESS);
  ASSERT_EQ(GrantAccess(other, kChunk), CUDA_SUCCESS);
  const auto tail = Read(other, kChunk / 2);
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), data.begin() + kChunk / 2));
  // A write through one mapping is seen through the other.
  ASSERT_EQ(cuMemsetD8_v2(other, 0x5a, 16), CUDA_SUCCESS);
  EXPECT_TRUE(AllEqual(Read(va_ + kChunk, 16), 0x5a));
  // Device to device across the boundary, asynchronously.
  CUstream stream = nullptr;
  ASSERT_EQ(cuStreamCreate(&stream, 0), CUDA_SUCCESS);
  CUdeviceptr copy = 0;
  ASSERT_EQ(cuMemAlloc_v2(&copy, 2 * kChunk), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoDAsync_v2(copy, va_, 2 * kChunk, stream), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(Read(copy, 2 * kChunk), Read(va_, 2 * kChunk));
}

TEST_F(VmmData, AMappingShowsThePhysicalMemoryFromItsOffset) {
  const CUmemGenericAllocationHandle handle = Create(2 * kChunk);
  CUdeviceptr whole = 0, upper = 0;
  ASSERT_EQ(cuMemAddressReserve(&whole, 2 * kChunk, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAddressReserve(&upper, kChunk, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(whole, 2 * kChunk, 0, handle, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(upper, kChunk, kChunk, handle, 0), CUDA_SUCCESS);
  ASSERT_EQ(GrantAccess(whole, 2 * kChunk), CUDA_SUCCESS);
  ASSERT_EQ(GrantAccess(upper, kChunk), CUDA_SUCCESS);
  const auto data = Pattern(2 * kChunk, 6);
  ASSERT_EQ(cuMemcpyHtoD_v2(whole, data.data(), data.size()), CUDA_SUCCESS);
  const auto seen = Read(upper, kChunk);
  EXPECT_TRUE(std::equal(seen.begin(), seen.end(), data.begin() + kChunk));
}

// The suspension the hook makes: chunks out to pinned host memory on its own stream, unmapped and
// released; created again, mapped at the same addresses, and copied back.
TEST_F(VmmData, UnmapReleaseCreateMapAndCopyBackRestoresTheData) {
  MapTwoChunks();
  const auto data = Pattern(2 * kChunk, 7);
  ASSERT_EQ(cuMemcpyHtoD_v2(va_, data.data(), data.size()), CUDA_SUCCESS);
  void* saved = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&saved, 2 * kChunk, CU_MEMHOSTALLOC_PORTABLE), CUDA_SUCCESS);
  CUstream stream = nullptr;
  ASSERT_EQ(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoHAsync_v2(saved, va_, kChunk, stream), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoHAsync_v2(static_cast<char*>(saved) + kChunk, va_ + kChunk, kChunk, stream),
            CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  ASSERT_EQ(cuMemUnmap(va_, 2 * kChunk), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(first_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(second_), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_VMM), 0u);
  // Away: neither readable nor writable.
  std::vector<unsigned char> probe(16, 0xee);
  EXPECT_EQ(cuMemcpyDtoH_v2(probe.data(), va_, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD8_v2(va_, 0, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_TRUE(AllEqual(probe, 0xee));

  first_ = Create(kChunk);
  second_ = Create(kChunk);
  ASSERT_EQ(cuMemMap(va_, kChunk, 0, first_, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va_ + kChunk, kChunk, 0, second_, 0), CUDA_SUCCESS);
  ASSERT_EQ(GrantAccess(va_, 2 * kChunk), CUDA_SUCCESS);
  EXPECT_TRUE(AllEqual(Read(va_, 2 * kChunk), 0));  // new physical memory: fresh contents
  ASSERT_EQ(cuMemcpyHtoDAsync_v2(va_, saved, kChunk, stream), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoD_v2(va_ + kChunk, static_cast<char*>(saved) + kChunk, kChunk), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(Read(va_, 2 * kChunk), data);
}

TEST_F(VmmData, CopiesOutsideAccessibleMemoryFailAndWriteNothing) {
  ASSERT_EQ(cuMemAddressReserve(&va_, 2 * kChunk, 0, 0, 0), CUDA_SUCCESS);
  first_ = Create(kChunk);
  ASSERT_EQ(cuMemMap(va_, kChunk, 0, first_, 0), CUDA_SUCCESS);
  const auto data = Pattern(kChunk, 8);
  // Mapped, but no access granted yet.
  EXPECT_EQ(cuMemcpyHtoD_v2(va_, data.data(), 64), CUDA_ERROR_INVALID_VALUE);
  // Read-only: reads, does not write.
  ASSERT_EQ(GrantAccess(va_, kChunk, CU_MEM_ACCESS_FLAGS_PROT_READ), CUDA_SUCCESS);
  EXPECT_EQ(cuMemsetD8_v2(va_, 1, 64), CUDA_ERROR_INVALID_VALUE);
  EXPECT_TRUE(AllEqual(Read(va_, 64), 0));
  ASSERT_EQ(GrantAccess(va_, kChunk), CUDA_SUCCESS);
  EXPECT_TRUE(AllEqual(Read(va_, kChunk), 0));  // nothing was written
  // Running past the mapping into the reserved, unmapped half: refused as a whole.
  EXPECT_EQ(cuMemcpyHtoD_v2(va_ + kChunk / 2, data.data(), kChunk), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD32_v2(va_ + kChunk - 4, 0x01020304u, 2), CUDA_ERROR_INVALID_VALUE);
  CUstream stream = nullptr;
  ASSERT_EQ(cuStreamCreate(&stream, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyHtoDAsync_v2(va_ + kChunk - 8, data.data(), 16, stream), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD8Async(va_ + kChunk, 1, 1, stream), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_TRUE(AllEqual(Read(va_, kChunk), 0));
  // Into an unmapped range: the host buffer keeps its bytes.
  std::vector<unsigned char> host(64, 0xee);
  EXPECT_EQ(cuMemcpyDtoH_v2(host.data(), va_ + kChunk, 64), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoHAsync_v2(host.data(), va_ + kChunk, 64, stream), CUDA_ERROR_INVALID_VALUE);
  EXPECT_TRUE(AllEqual(host, 0xee));
  // Access cannot be granted over a range that is not mapped throughout.
  EXPECT_EQ(GrantAccess(va_, 2 * kChunk), CUDA_ERROR_INVALID_VALUE);
  // Past the end of an allocation, device to device included.
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc_v2(&d, 4096), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyHtoD_v2(d + 4000, data.data(), 97), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoD_v2(d, va_ + kChunk - 100, 200), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoD_v2(va_ + kChunk - 100, d, 200), CUDA_ERROR_INVALID_VALUE);
  EXPECT_TRUE(AllEqual(Read(d, 4096), 0));
  EXPECT_TRUE(AllEqual(Read(va_, kChunk), 0));
  // A host pointer inside device address space is not host memory.
  EXPECT_EQ(cuMemcpyHtoD_v2(d, reinterpret_cast<const void*>(va_ + kChunk), 16), CUDA_ERROR_INVALID_VALUE);
}

// FAKE_CUDA_COPY_MS_PER_GIB: a copy between host and device takes its time. Lower bounds only.
TEST(CopyTime, ACopyTakesTheSetTimePerGiB) {
  ScopedKnobs knobs{{"FAKE_CUDA_COPY_MS_PER_GIB", "300"}};
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc_v2(&d, kGiB), CUDA_SUCCESS);
  // Untouched anonymous memory reads as zeros without being committed, and zeros written over
  // zeros commit nothing on the device side: the test costs no GiB of memory.
  void* source =
      mmap(nullptr, kGiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(source, MAP_FAILED);
  long long before = monotonic_ns();
  ASSERT_EQ(cuMemcpyHtoD_v2(d, source, kGiB), CUDA_SUCCESS);
  EXPECT_GE(monotonic_ns() - before, 300 * kMs);
  // Asynchronous: the stream is busy that long, and its synchronisation waits for it.
  CUstream stream = nullptr;
  ASSERT_EQ(cuStreamCreate(&stream, 0), CUDA_SUCCESS);
  before = monotonic_ns();
  ASSERT_EQ(cuMemcpyHtoDAsync_v2(d, source, kGiB / 2, stream), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync_v2(d, source, kGiB / 2, stream), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(stream), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_GE(monotonic_ns() - before, 300 * kMs);
  before = monotonic_ns();
  ASSERT_EQ(cuMemcpyHtoDAsync_v2(d, source, kGiB, stream), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_GE(monotonic_ns() - before, 300 * kMs);
  // Device to device and sets are not host copies: no time.
  ASSERT_EQ(cuMemcpyDtoDAsync_v2(d, d + kGiB / 2, 1024, stream), CUDA_SUCCESS);
  EXPECT_EQ(munmap(source, kGiB), 0);
}

// FAKE_CUDA_FAULT_ON_UNMAPPED=1: a kernel launched while VMM memory is unmapped faults.
class FaultOnUnmapped : public ::testing::Test {
 protected:
  explicit FaultOnUnmapped(const char* knob = "1") : knobs_({{"FAKE_CUDA_FAULT_ON_UNMAPPED", knob}}) {}

  void SetUp() override {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    static const char image[] = "any bytes";
    ASSERT_EQ(cuModuleLoadData(&module_, image), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleGetFunction(&kernel_, module_, "spin_1000us"), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamCreate(&stream_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuMemAddressReserve(&va_, 2 * kChunk, 0, 0, 0), CUDA_SUCCESS);
    handle_ = Create(2 * kChunk);
    ASSERT_EQ(cuMemMap(va_, 2 * kChunk, 0, handle_, 0), CUDA_SUCCESS);
    ASSERT_EQ(GrantAccess(va_, 2 * kChunk), CUDA_SUCCESS);
  }

  CUresult Launch(CUstream stream) {
    return cuLaunchKernel(kernel_, 1, 1, 1, 32, 1, 1, 0, stream, nullptr, nullptr);
  }

  ScopedKnobs knobs_;
  CUcontext ctx_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction kernel_ = nullptr;
  CUstream stream_ = nullptr;
  CUdeviceptr va_ = 0;
  CUmemGenericAllocationHandle handle_ = 0;
};

TEST_F(FaultOnUnmapped, ALaunchAfterAnUnmapFailsAndPoisonsTheContext) {
  ASSERT_EQ(Launch(stream_), CUDA_SUCCESS);  // mapped: runs
  ASSERT_EQ(cuMemUnmap(va_, 2 * kChunk), CUDA_SUCCESS);
  EXPECT_EQ(fake_cuda_faults(), 0u);
  const unsigned long long launched = fake_cuda_launch_count();
  EXPECT_EQ(Launch(stream_), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(fake_cuda_faults(), 1u);
  EXPECT_EQ(fake_cuda_launch_count(), launched);
  // Poisoned: launches, synchronisations, copies, allocations all fail the same way, even
  // with the memory mapped again.
  EXPECT_EQ(cuMemMap(va_, 2 * kChunk, 0, handle_, 0), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(Launch(nullptr), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(cuStreamSynchronize(stream_), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  char host[16] = {};
  CUdeviceptr d = 0;
  EXPECT_EQ(cuMemAlloc_v2(&d, 64), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(cuMemcpyHtoD_v2(va_, host, sizeof host), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(cuMemcpyDtoHAsync_v2(host, va_, sizeof host, stream_), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(cuMemCreate(&handle_, kChunk, nullptr, 0), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(fake_cuda_faults(), 1u);  // one fault poisons once
  // Resetting the primary context is the way back, as on a GPU.
  ASSERT_EQ(cuDevicePrimaryCtxReset_v2(0), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAlloc_v2(&d, 64), CUDA_SUCCESS);
}

TEST_F(FaultOnUnmapped, MappingTheRangeAgainOrFreeingTheReservationDisarmsIt) {
  ASSERT_EQ(cuMemUnmap(va_, 2 * kChunk), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va_, kChunk, 0, handle_, 0), CUDA_SUCCESS);  // half of it only
  ASSERT_EQ(cuMemMap(va_ + kChunk, kChunk, kChunk, handle_, 0), CUDA_SUCCESS);
  EXPECT_EQ(Launch(stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemUnmap(va_ + kChunk, kChunk), CUDA_SUCCESS);
  ASSERT_EQ(cuMemUnmap(va_, kChunk), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAddressFree(va_, 2 * kChunk), CUDA_SUCCESS);
  EXPECT_EQ(Launch(stream_), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(fake_cuda_faults(), 0u);
}

TEST_F(FaultOnUnmapped, GraphLaunchesFaultToo) {
  CUgraph graph = nullptr;
  ASSERT_EQ(cuGraphCreate(&graph, 0), CUDA_SUCCESS);
  CUDA_KERNEL_NODE_PARAMS node_params = {};
  node_params.func = kernel_;
  node_params.gridDimX = node_params.gridDimY = node_params.gridDimZ = 1;
  node_params.blockDimX = node_params.blockDimY = node_params.blockDimZ = 1;
  CUgraphNode node = nullptr;
  ASSERT_EQ(cuGraphAddKernelNode_v2(&node, graph, nullptr, 0, &node_params), CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemUnmap(va_, 2 * kChunk), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphLaunch(exec, stream_), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(fake_cuda_faults(), 1u);
  EXPECT_EQ(cuStreamSynchronize(stream_), CUDA_ERROR_ILLEGAL_ADDRESS);
}

// A kernel held behind a wait on a memory word (as the hook parks a stream), released while the
// memory is away, faults when it runs.
TEST_F(FaultOnUnmapped, AHeldKernelReleasedWhileMemoryIsAwayFaults) {
  void* word = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&word, 4, 0), CUDA_SUCCESS);
  const auto address = reinterpret_cast<CUdeviceptr>(word);
  ASSERT_EQ(cuStreamWaitValue32_v2(stream_, address, 1, CU_STREAM_WAIT_VALUE_GEQ), CUDA_SUCCESS);
  ASSERT_EQ(Launch(stream_), CUDA_SUCCESS);  // held
  ASSERT_EQ(cuMemUnmap(va_, 2 * kChunk), CUDA_SUCCESS);
  __atomic_store_n(static_cast<std::uint32_t*>(word), 1u, __ATOMIC_RELEASE);
  EXPECT_EQ(cuStreamSynchronize(stream_), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(fake_cuda_faults(), 1u);
}

// A copy held the same way, whose memory is gone when it runs, faults too (its bytes moved at the
// call: the fake cannot move them later).
TEST_F(FaultOnUnmapped, AHeldCopyReleasedWhileItsMemoryIsAwayFaults) {
  void* word = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&word, 4, 0), CUDA_SUCCESS);
  const auto address = reinterpret_cast<CUdeviceptr>(word);
  ASSERT_EQ(cuStreamWaitValue32_v2(stream_, address, 1, CU_STREAM_WAIT_VALUE_GEQ), CUDA_SUCCESS);
  const char host[16] = "still queued";
  ASSERT_EQ(cuMemcpyHtoDAsync_v2(va_, host, sizeof host, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemUnmap(va_, 2 * kChunk), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(handle_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAddressFree(va_, 2 * kChunk), CUDA_SUCCESS);  // no unmapped range left
  __atomic_store_n(static_cast<std::uint32_t*>(word), 1u, __ATOMIC_RELEASE);
  EXPECT_EQ(cuStreamSynchronize(stream_), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(fake_cuda_faults(), 1u);
}

TEST_F(FaultOnUnmapped, AHeldKernelReleasedAfterTheMemoryIsBackRuns) {
  void* word = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&word, 4, 0), CUDA_SUCCESS);
  const auto address = reinterpret_cast<CUdeviceptr>(word);
  ASSERT_EQ(cuStreamWaitValue32_v2(stream_, address, 1, CU_STREAM_WAIT_VALUE_GEQ), CUDA_SUCCESS);
  ASSERT_EQ(Launch(stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemUnmap(va_, 2 * kChunk), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va_, 2 * kChunk, 0, handle_, 0), CUDA_SUCCESS);
  ASSERT_EQ(GrantAccess(va_, 2 * kChunk), CUDA_SUCCESS);
  __atomic_store_n(static_cast<std::uint32_t*>(word), 1u, __ATOMIC_RELEASE);
  EXPECT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(fake_cuda_faults(), 0u);
}

// Without the knob, unmapping is legitimate (PyTorch's expandable segments do it): no fault.
class NoFaultKnob : public FaultOnUnmapped {
 protected:
  NoFaultKnob() : FaultOnUnmapped("0") {}
};

TEST_F(NoFaultKnob, ALaunchAfterAnUnmapRuns) {
  ASSERT_EQ(cuMemUnmap(va_, 2 * kChunk), CUDA_SUCCESS);
  EXPECT_EQ(Launch(stream_), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(fake_cuda_faults(), 0u);
}

}  // namespace
