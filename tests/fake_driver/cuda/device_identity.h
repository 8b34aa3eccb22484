// How the simulated devices present themselves: shared by the cuDevice* entry points and the
// control API (which NVML reads), so both views agree byte for byte.
#pragma once

#include <cstdio>
#include <cstring>

namespace fake_cuda {

inline constexpr const char kDeviceName[] = "NVIDIA H100 80GB HBM3 (cuslice fake)";

// Distinct per device and stable across runs and processes.
inline void device_uuid(int dev, unsigned char out[16]) {
  static constexpr unsigned char kPrefix[15] = {0xfa, 0xce, 0xc0, 0xda, 0x00, 0x00, 0x4a, 0x11,
                                                0x8e, 0x00, 0xc5, 0x11, 0xce, 0x00, 0x00};
  std::memcpy(out, kPrefix, sizeof(kPrefix));
  out[15] = static_cast<unsigned char>(dev);
}

// "0000:BB:00.0", the format cuDeviceGetPCIBusId returns; buses 0x19, 0x1a, ...
inline int format_pci_bus_id(int dev, char* out, std::size_t len) {
  return std::snprintf(out, len, "0000:%02x:00.0", 0x19 + dev);
}

}  // namespace fake_cuda
