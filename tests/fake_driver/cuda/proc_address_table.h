// The table cuGetProcAddress searches: one row per ABI of each driver entry point, generated at
// build time (generate_entry_points.py) from cudaTypedefs.h and the stub's export list.
#pragma once

#include <cstddef>

namespace fake_cuda {

struct ProcAddressRow {
  const char* symbol;  // base name, as callers ask: "cuMemAlloc"
  int version;         // CUDA version that introduced this ABI: 3020
  bool per_thread;     // the _ptsz / _ptds twin
  void* address;       // the exported function of the exact name: cuMemAlloc_v2
};

// Sorted by symbol (strcmp order), then version, then per_thread.
extern const ProcAddressRow kProcAddressTable[];
extern const std::size_t kProcAddressTableSize;

}  // namespace fake_cuda
