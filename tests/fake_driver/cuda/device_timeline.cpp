#include "tests/fake_driver/cuda/device_timeline.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tests/fake_driver/cuda/sim_clock.h"

namespace fake_cuda {

CUresult DeviceTimeline::attach(const Knobs& knobs) {
  detach();
  private_ = std::make_unique<TimelineSegment>();  // value-initialised: all zero, ready
  segment_ = private_.get();
  if (knobs.shared_device.empty()) return CUDA_SUCCESS;
  return map_shared(knobs.shared_device);
}

void DeviceTimeline::detach() {
  if (mapping_ != nullptr) munmap(mapping_, sizeof(TimelineSegment));
  mapping_ = nullptr;
  segment_ = private_.get();
  error_.clear();
}

CUresult DeviceTimeline::map_shared(const std::string& knob) {
  // shm_open names are "/name" with no other slash; accept the name with or without its slash.
  const std::string name = knob.front() == '/' ? knob : "/" + knob;
  auto fail = [&](const char* what) {
    error_ = "FAKE_CUDA_SHARED_DEVICE=" + knob + ": " + what;
    if (errno != 0) error_ += std::string(": ") + std::strerror(errno);
    return CUDA_ERROR_OPERATING_SYSTEM;
  };
  errno = 0;
  if (name.size() < 2 || name.find('/', 1) != std::string::npos) return fail("not a shm name");
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return fail("shm_open");
  // Whoever finds it short (just created, by this process or by one that died before sizing
  // it) sizes it; zero bytes are a valid segment, so nobody waits for anybody.
  struct stat st {};
  bool ok = fstat(fd, &st) == 0;
  if (ok && static_cast<std::size_t>(st.st_size) < sizeof(TimelineSegment)) {
    ok = ftruncate(fd, sizeof(TimelineSegment)) == 0 && fstat(fd, &st) == 0;
  }
  if (!ok) {
    close(fd);
    return fail("sizing");
  }
  if (static_cast<std::size_t>(st.st_size) != sizeof(TimelineSegment)) {
    close(fd);
    errno = 0;
    return fail("the object has another size (another layout, or not a timeline)");
  }
  void* mapped = mmap(nullptr, sizeof(TimelineSegment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (mapped == MAP_FAILED) return fail("mmap");
  auto* segment = static_cast<TimelineSegment*>(mapped);
  std::uint64_t tag = 0;
  if (!segment->tag.compare_exchange_strong(tag, TimelineSegment::kTag) &&
      tag != TimelineSegment::kTag) {
    munmap(mapped, sizeof(TimelineSegment));
    errno = 0;
    return fail("the object holds another layout");
  }
  mapping_ = mapped;
  segment_ = segment;
  return CUDA_SUCCESS;
}

std::int64_t DeviceTimeline::place_kernel(int dev, std::int64_t ready_ns,
                                          std::int64_t duration_ns) {
  TimelineSegment::Device& d = device(dev);
  std::int64_t tail = d.tail_ns.load(std::memory_order_acquire);
  if (duration_ns <= 0) return std::max({ready_ns, tail, monotonic_ns()});
  std::int64_t end = 0;
  do {
    // now is read again on each try: after losing a race the kernel must not start in the past.
    end = std::max({ready_ns, tail, monotonic_ns()}) + duration_ns;
  } while (!d.tail_ns.compare_exchange_weak(tail, end, std::memory_order_acq_rel,
                                            std::memory_order_acquire));
  d.busy_ns.fetch_add(static_cast<std::uint64_t>(duration_ns), std::memory_order_relaxed);
  d.kernels.fetch_add(1, std::memory_order_relaxed);
  return end;
}

}  // namespace fake_cuda
