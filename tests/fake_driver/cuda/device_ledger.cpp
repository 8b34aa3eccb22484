#include "tests/fake_driver/cuda/device_ledger.h"

#include <unistd.h>

#include <cassert>
#include <numeric>

namespace fake_cuda {

void DeviceLedger::reset(int device_count, std::size_t bytes_per_device, ProcessTable* table,
                         std::uint32_t hidden_flags) {
  device_count_ = device_count;
  devices_ = {};
  for (int dev = 0; dev < device_count; ++dev) devices_[dev].total = bytes_per_device;
  table_ = table;
  hidden_flags_ = hidden_flags;
  row_ = claim_row(*table_);
  if (row_ != nullptr) row_->flags.fetch_or(hidden_flags_);
}

void DeviceLedger::detach() {
  if (table_ != nullptr) drop_row(*table_, row_);
  row_ = nullptr;
  table_ = nullptr;
}

std::size_t DeviceLedger::used(int dev) const {
  const auto& held = devices_[dev].held;
  return std::accumulate(held.begin(), held.end(), std::size_t{0});
}

std::size_t DeviceLedger::device_used(int dev) {
  TableLock lock(*table_);
  return fake_cuda::device_used(*table_, dev);
}

ProcessTable::Row* DeviceLedger::own_row() {
  if (row_ == nullptr || row_->pid.load() != getpid()) {
    row_ = claim_row(*table_);
    if (row_ != nullptr) row_->flags.fetch_or(hidden_flags_);
  }
  return row_;
}

bool DeviceLedger::try_charge(int dev, fake_cuda_charge charge, std::size_t bytes) {
  const Device& device = devices_[dev];
  if (device.limit != 0 && charge != FAKE_CUDA_CHARGE_CONTEXT && charge != FAKE_CUDA_CHARGE_MODULE) {
    const std::size_t allocated =
        used(dev) - device.held[FAKE_CUDA_CHARGE_CONTEXT] - device.held[FAKE_CUDA_CHARGE_MODULE];
    if (bytes > device.limit || allocated > device.limit - bytes) return false;
  }
  ProcessTable::Row* row = own_row();
  if (row == nullptr || !try_take(*table_, row, dev, bytes, devices_[dev].total)) return false;
  devices_[dev].held[charge] += bytes;
  return true;
}

void DeviceLedger::release(int dev, fake_cuda_charge charge, std::size_t bytes) {
  assert(devices_[dev].held[charge] >= bytes && "released more than was charged");
  devices_[dev].held[charge] -= bytes;
  if (ProcessTable::Row* row = own_row()) give_back(row, dev, bytes);
}

}  // namespace fake_cuda
