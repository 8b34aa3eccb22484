// cuGetProcAddress and cuGetProcAddress_v2, resolved the way the real driver resolves them:
//   - cudaVersion above the driver's (13000): CUDA_ERROR_INVALID_VALUE;
//   - unknown base name: CUDA_SUCCESS, *pfn = NULL, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
//   - no ABI of the name at or below cudaVersion: CUDA_SUCCESS, *pfn = NULL,
//     CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
//   - otherwise the newest ABI at or below cudaVersion; with
//     CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM its _ptsz/_ptds twin if it has one.
//     CU_GET_PROC_ADDRESS_DEFAULT is the legacy-stream search: the driver cannot know how the
//     caller was compiled.
// Callable before cuInit (the runtime resolves everything before calling it).
//
// The addresses in the table are the library's own definitions: the fake is linked with
// -Bsymbolic, so a preloaded interposer defining the same names does not replace them here,
// exactly as it cannot inside the real driver.
#include <algorithm>
#include <cstring>

#include "tests/fake_driver/cuda/driver_state.h"
#include "tests/fake_driver/cuda/proc_address_table.h"

using namespace fake_cuda;

namespace {

CUresult resolve(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                 CUdriverProcAddressQueryResult* status) {
  {
    Session s;
    ++s->proc_address_calls;
  }
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  if (cuda_version > kDriverVersion) return CUDA_ERROR_INVALID_VALUE;

  const ProcAddressRow* begin = kProcAddressTable;
  const ProcAddressRow* end = kProcAddressTable + kProcAddressTableSize;
  const ProcAddressRow* first = std::partition_point(
      begin, end, [&](const ProcAddressRow& row) { return std::strcmp(row.symbol, symbol) < 0; });
  const ProcAddressRow* last = std::partition_point(
      first, end, [&](const ProcAddressRow& row) { return std::strcmp(row.symbol, symbol) == 0; });

  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  const ProcAddressRow* plain = nullptr;
  const ProcAddressRow* twin = nullptr;
  for (const ProcAddressRow* row = first; row != last; ++row) {
    found = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    if (row->version > cuda_version) continue;
    const ProcAddressRow*& best = row->per_thread ? twin : plain;
    if (best == nullptr || row->version >= best->version) best = row;
  }
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  // A twin older than the chosen ABI would be another ABI's twin: the driver falls back then.
  const bool use_twin =
      per_thread && twin != nullptr && (plain == nullptr || twin->version >= plain->version);
  const ProcAddressRow* chosen = use_twin ? twin : plain;
  if (chosen != nullptr) {
    *pfn = chosen->address;
    found = CU_GET_PROC_ADDRESS_SUCCESS;
  }
  if (status != nullptr) *status = found;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cuda_version,
                                  cuuint64_t flags) {
  return resolve(symbol, pfn, cuda_version, flags, nullptr);
}

CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  return resolve(symbol, pfn, cuda_version, flags, status);
}

}  // extern "C"
