// Settings of the simulated device, from the environment. Read when the driver state is built
// (first call into the fake) and again by fake_cuda_reset(); never on a hot path.
//
//   FAKE_CUDA_DEVICE_COUNT   devices, 1..kMaxDevices               default 1
//   FAKE_CUDA_DEVICE_MEMORY  bytes of memory per device            default 16 GiB
//   FAKE_CUDA_CONTEXT_BYTES  device memory each live context holds default 512 MiB
//   FAKE_CUDA_MODULE_BYTES   device memory the process's first launch adds to its context
//                            (lazy module loading)                 default 0
//
// A value that is not a plain decimal number (or a device count out of range) keeps the default.
#pragma once

#include <cstddef>

namespace fake_cuda {

inline constexpr int kMaxDevices = 16;

struct Knobs {
  int device_count = 1;
  std::size_t device_memory = std::size_t{16} << 30;
  std::size_t context_bytes = std::size_t{512} << 20;
  std::size_t module_bytes = 0;
};

Knobs read_knobs_from_environment();

}  // namespace fake_cuda
