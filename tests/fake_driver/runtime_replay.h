// Replays how the CUDA 13 runtime (cudart) reaches the driver, so that a test can check what an
// interposer hands back on that path without a GPU or cudart:
//
//   1. dlopen("libcuda.so.1")
//   2. dlsym(handle, "cuGetProcAddress_v2")
//   3. ask that function for "cuGetProcAddress" at 12000 (cudart's self-query)
//   4. ask the function it got back for each (symbol, version, flags) query.
//
// The harness only records; it asserts nothing. Tests check the pointers, e.g. with dladdr()
// that each lies in the interposer, or that legacy and per-thread pointers differ.
// Independent of the hook; links against nothing but libdl.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <span>
#include <string>
#include <vector>

namespace runtime_replay {

struct Query {
  const char* symbol;      // base name, as cudart asks: "cuMemAlloc"
  int cuda_version;        // the version cudart asks at: that of the ABI it was built against
  cuuint64_t flags;        // CU_GET_PROC_ADDRESS_LEGACY_STREAM or _PER_THREAD_DEFAULT_STREAM
  const char* exact_name;  // the exported name the real driver resolves it to: "cuMemAlloc_v2"
};

struct Lookup {
  Query query;
  CUresult result = CUDA_ERROR_UNKNOWN;
  void* pfn = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
};

struct Replay {
  std::string error;              // empty when every step up to the self-query worked
  void* library = nullptr;        // the dlopen handle (kept open, as cudart keeps it)
  void* entry_point = nullptr;    // dlsym(library, "cuGetProcAddress_v2")
  CUresult self_result = CUDA_ERROR_UNKNOWN;
  CUdriverProcAddressQueryResult self_status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  void* self_lookup = nullptr;    // what entry_point returned for "cuGetProcAddress" at 12000
  std::vector<Lookup> lookups;    // one per query, in order, made through self_lookup

  bool ok() const { return error.empty(); }
};

// The lookups of cudart 13 that matter to a memory quota and a launch gate: each symbol at the
// version of its current ABI with the legacy-stream flag, and again with the per-thread flag at
// the version of its _ptsz twin where it has one. Versions checked against cudaTypedefs.h.
std::span<const Query> default_queries();

Replay replay(std::span<const Query> queries = default_queries(),
              const char* library = "libcuda.so.1");

}  // namespace runtime_replay
