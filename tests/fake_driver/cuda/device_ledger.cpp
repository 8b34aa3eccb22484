#include "device_ledger.h"

#include <cassert>
#include <numeric>

namespace fake_cuda {

void DeviceLedger::reset(int device_count, std::size_t bytes_per_device) {
  device_count_ = device_count;
  devices_ = {};
  for (int dev = 0; dev < device_count; ++dev) devices_[dev].total = bytes_per_device;
}

std::size_t DeviceLedger::used(int dev) const {
  const auto& held = devices_[dev].held;
  return std::accumulate(held.begin(), held.end(), std::size_t{0});
}

bool DeviceLedger::try_charge(int dev, fake_cuda_charge charge, std::size_t bytes) {
  if (bytes > devices_[dev].total - used(dev)) return false;
  devices_[dev].held[charge] += bytes;
  return true;
}

void DeviceLedger::release(int dev, fake_cuda_charge charge, std::size_t bytes) {
  assert(devices_[dev].held[charge] >= bytes && "released more than was charged");
  devices_[dev].held[charge] -= bytes;
}

}  // namespace fake_cuda
