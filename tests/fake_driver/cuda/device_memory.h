// The contents of simulated device memory: the bytes of a cuMemAlloc-family allocation or of a
// cuMemCreate physical allocation, and the moves of bytes that copies and sets make.
//
// Lazy, so that a 16 GiB fake device costs nothing until written: a DeviceBytes holds no
// memory until the first write of a byte that is not zero, which maps anonymous memory of its
// size (MAP_NORESERVE: only the pages written are ever committed); until then it reads as
// zeros. Writing zeros where the bytes are still zero touches nothing. The mapping is
// unmapped when the DeviceBytes goes (the allocation is freed, the physical memory released).
// Private to the process (a fork copies it on write): processes sharing a device
// (FAKE_CUDA_SHARED_DEVICE) share its accounting and its timeline, not its bytes.
//
// A device range (what a copy reads or writes) is a list of Spans, pieces of DeviceBytes laid
// end to end: one for an allocation, one per mapping for a range of VMM memory that crosses
// mappings (DriverState::device_spans finds them).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fake_cuda {

class DeviceBytes {
 public:
  explicit DeviceBytes(std::size_t size) : size_(size) {}
  ~DeviceBytes();
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;

  std::size_t size() const { return size_; }
  // The bytes, or null while every byte is zero (nothing written yet).
  const unsigned char* data() const { return data_; }
  // The bytes, mapped on first use; null when the mapping fails.
  unsigned char* materialize();

 private:
  std::size_t size_ = 0;
  unsigned char* data_ = nullptr;
  std::size_t mapped_ = 0;
};

struct Span {
  DeviceBytes* bytes = nullptr;
  std::size_t offset = 0;  // into bytes
  std::size_t length = 0;
};
using Spans = std::vector<Span>;

// The total length of a device range.
std::size_t spans_length(const Spans& spans);

// Host memory <-> device range, [at, at + n) of the range. Writes fail with
// CUDA_ERROR_OUT_OF_MEMORY only when the host cannot map the bytes (what was written before
// stays written).
CUresult write_spans(const Spans& spans, std::size_t at, const void* src, std::size_t n);
void read_spans(const Spans& spans, std::size_t at, void* dst, std::size_t n);

// Device range -> device range, front to back in bounded pieces (overlapping ranges: the result
// is undefined, as on the real driver).
CUresult copy_spans(const Spans& dst, const Spans& src, std::size_t n);

// Fills the range with a pattern repeated every `period` bytes (1: cuMemsetD8, 4: cuMemsetD32).
CUresult fill_spans(const Spans& spans, const unsigned char* pattern, std::size_t period);

// Nanoseconds a copy of bytes between host and device takes at ms_per_gib.
std::int64_t copy_duration_ns(std::size_t bytes, std::uint64_t ms_per_gib);

}  // namespace fake_cuda
