#include "tests/fake_driver/cuda/device_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace fake_cuda {
namespace {

// Copies go in pieces of this size: a zero piece is not written where the bytes are still zero,
// and a device-to-device copy stages through one such buffer.
constexpr std::size_t kPiece = std::size_t{64} << 10;

bool all_zero(const unsigned char* p, std::size_t n) {
  return n == 0 || (p[0] == 0 && std::memcmp(p, p + 1, n - 1) == 0);
}

// Calls visit(span, offset into the span's bytes, offset into [at, at + n), length) for each
// piece of the spans that [at, at + n) covers, in order.
template <class Visit>
bool for_each_piece(const Spans& spans, std::size_t at, std::size_t n, Visit visit) {
  std::size_t start = 0;  // of the current span, in the range
  for (const Span& span : spans) {
    const std::size_t end = start + span.length;
    if (n > 0 && at < end && at + n > start) {
      const std::size_t from = std::max(at, start);
      const std::size_t to = std::min(at + n, end);
      if (!visit(span, span.offset + (from - start), from - at, to - from)) return false;
    }
    start = end;
  }
  return true;
}

}  // namespace

DeviceBytes::~DeviceBytes() {
  if (data_ != nullptr) munmap(data_, mapped_);
}

unsigned char* DeviceBytes::materialize() {
  if (data_ != nullptr || size_ == 0) return data_;
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t mapped = (size_ + page - 1) / page * page;
  void* block = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (block == MAP_FAILED) return nullptr;
  data_ = static_cast<unsigned char*>(block);
  mapped_ = mapped;
  return data_;
}

std::size_t spans_length(const Spans& spans) {
  std::size_t total = 0;
  for (const Span& span : spans) total += span.length;
  return total;
}

CUresult write_spans(const Spans& spans, std::size_t at, const void* src, std::size_t n) {
  const auto* from = static_cast<const unsigned char*>(src);
  bool mapped = true;
  for_each_piece(spans, at, n, [&](const Span& span, std::size_t offset, std::size_t in_range,
                                   std::size_t length) {
    for (std::size_t done = 0; done < length; done += kPiece) {
      const std::size_t piece = std::min(kPiece, length - done);
      const unsigned char* source = from + in_range + done;
      if (all_zero(source, piece)) {
        // Zeros over zeros: leave the pages untouched (never committed).
        const unsigned char* current = span.bytes->data();
        if (current == nullptr || all_zero(current + offset + done, piece)) continue;
      }
      unsigned char* bytes = span.bytes->materialize();
      if (bytes == nullptr) {
        mapped = false;
        return false;
      }
      std::memmove(bytes + offset + done, source, piece);
    }
    return true;
  });
  return mapped ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

void read_spans(const Spans& spans, std::size_t at, void* dst, std::size_t n) {
  auto* to = static_cast<unsigned char*>(dst);
  for_each_piece(spans, at, n, [&](const Span& span, std::size_t offset, std::size_t in_range,
                                   std::size_t length) {
    const unsigned char* bytes = span.bytes->data();
    if (bytes == nullptr) {
      std::memset(to + in_range, 0, length);
    } else {
      std::memmove(to + in_range, bytes + offset, length);
    }
    return true;
  });
}

CUresult copy_spans(const Spans& dst, const Spans& src, std::size_t n) {
  std::vector<unsigned char> buffer(std::min(n, kPiece * 16));
  for (std::size_t done = 0; done < n; done += buffer.size()) {
    const std::size_t piece = std::min(buffer.size(), n - done);
    read_spans(src, done, buffer.data(), piece);
    if (CUresult rc = write_spans(dst, done, buffer.data(), piece)) return rc;
  }
  return CUDA_SUCCESS;
}

CUresult fill_spans(const Spans& spans, const unsigned char* pattern, std::size_t period) {
  // kPiece is a multiple of every period, so each piece starts at the pattern's first byte.
  std::vector<unsigned char> buffer(kPiece);
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = pattern[i % period];
  const std::size_t n = spans_length(spans);
  for (std::size_t done = 0; done < n; done += buffer.size()) {
    if (CUresult rc = write_spans(spans, done, buffer.data(), std::min(buffer.size(), n - done))) {
      return rc;
    }
  }
  return CUDA_SUCCESS;
}

std::int64_t copy_duration_ns(std::size_t bytes, std::uint64_t ms_per_gib) {
  const long double ns = static_cast<long double>(bytes) * ms_per_gib * 1e6L / (1ull << 30);
  return ns >= static_cast<long double>(INT64_MAX / 4) ? INT64_MAX / 4 : static_cast<std::int64_t>(ns);
}

}  // namespace fake_cuda
