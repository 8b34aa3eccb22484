// What each simulated device holds, by charge: the one truth every view of device memory
// (cuMemGetInfo, NVML, fake_cuda_device_used) reads.
//
// The ledger keeps this process's charges by kind; what the device holds in all is the process
// table's (process_table.h): this process's row there carries its total per device, and a
// charge succeeds only while the rows of every live process sharing the device leave room for
// it. With a device private to the process the table holds this process alone, so both views
// agree. Guarded by DriverState's mutex (the table has its own lock).
#pragma once

#include <array>
#include <cstddef>

#include "tests/fake_driver/cuda/knobs.h"
#include "tests/fake_driver/cuda/process_table.h"
#include "tests/fake_driver/fake_cuda_control.h"

namespace fake_cuda {

class DeviceLedger {
 public:
  // Starts afresh on table, in a row of its own (any row this process had there is dropped).
  // hidden_flags (ProcessTable::kHas*): what the row always says the process holds
  // (FAKE_CUDA_HIDDEN_BLOCKERS), whatever its allocations.
  void reset(int device_count, std::size_t bytes_per_device, ProcessTable* table, std::uint32_t hidden_flags = 0);
  // Gives this process's row back (before the table goes away).
  void detach();

  int device_count() const { return device_count_; }
  bool valid(int dev) const { return dev >= 0 && dev < device_count_; }
  std::size_t total(int dev) const { return devices_[dev].total; }
  // What this process holds on dev, all charges together, and by one charge.
  std::size_t used(int dev) const;
  std::size_t used_by(int dev, fake_cuda_charge charge) const {
    return devices_[dev].held[charge];
  }
  // What every process sharing the device holds on it (this one included).
  std::size_t device_used(int dev);

  // Takes bytes on dev, or nothing and false when the device lacks them (out of memory), or when
  // an allocation (any charge but the context's and the module's) would take this process past
  // its limit on dev.
  bool try_charge(int dev, fake_cuda_charge charge, std::size_t bytes);
  // The most this process may allocate on dev (an MPS client's pinned device memory limit);
  // 0: none. Dropped by reset().
  void set_limit(int dev, std::size_t bytes) {
    if (dev >= 0 && dev < kMaxDevices) devices_[dev].limit = bytes;
  }
  void release(int dev, fake_cuda_charge charge, std::size_t bytes);

  // This process's row in the table: the checkpoint state its driver calls honour (Session).
  ProcessTable::Row* row() const { return row_; }
  ProcessTable* table() const { return table_; }
  std::uint32_t hidden_flags() const { return hidden_flags_; }

 private:
  // The row, claimed again when a forked child finds its parent's.
  ProcessTable::Row* own_row();

  struct Device {
    std::size_t total;
    std::array<std::size_t, FAKE_CUDA_CHARGE_COUNT> held;
    std::size_t limit;  // 0: none
  };
  int device_count_ = 0;
  std::array<Device, kMaxDevices> devices_{};
  ProcessTable* table_ = nullptr;
  ProcessTable::Row* row_ = nullptr;
  std::uint32_t hidden_flags_ = 0;
};

}  // namespace fake_cuda
