// What each simulated device holds, by charge: the one truth every view of device memory
// (cuMemGetInfo, NVML, fake_cuda_device_used) reads.
//
// Plain data on purpose (standard layout, fixed size, no pointers): when several processes must
// share one device (the scheduler's tests), this struct moves into a shared mmap'd file with a
// per-process row and a robust process-shared mutex beside it; the callers do not change.
// Today it lives in the process's DriverState and is guarded by DriverState's mutex.
#pragma once

#include <array>
#include <cstddef>
#include <type_traits>

#include "fake_cuda_control.h"
#include "knobs.h"

namespace fake_cuda {

class DeviceLedger {
 public:
  void reset(int device_count, std::size_t bytes_per_device);

  int device_count() const { return device_count_; }
  bool valid(int dev) const { return dev >= 0 && dev < device_count_; }
  std::size_t total(int dev) const { return devices_[dev].total; }
  std::size_t used(int dev) const;
  std::size_t used_by(int dev, fake_cuda_charge charge) const {
    return devices_[dev].held[charge];
  }

  // Takes bytes on dev, or nothing and false when the device lacks them (out of memory).
  bool try_charge(int dev, fake_cuda_charge charge, std::size_t bytes);
  void release(int dev, fake_cuda_charge charge, std::size_t bytes);

 private:
  struct Device {
    std::size_t total;
    std::array<std::size_t, FAKE_CUDA_CHARGE_COUNT> held;
  };
  int device_count_ = 0;
  std::array<Device, kMaxDevices> devices_{};
};

static_assert(std::is_standard_layout_v<DeviceLedger> && std::is_trivially_copyable_v<DeviceLedger>,
              "the ledger must stay placeable in shared memory");

}  // namespace fake_cuda
