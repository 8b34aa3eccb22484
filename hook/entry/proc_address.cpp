// The first door: CUDA 11.3+ runtimes (static or shared), cuBLAS and others dlopen
// libcuda.so.1, dlsym "cuGetProcAddress_v2" (which the dlsym door answers with this hook),
// ask it for itself and then for every entry point.
//
// The driver decides: the real cuGetProcAddress runs first, with its own version, flags and
// per-thread-stream rules and its own NOT_FOUND / VERSION_NOT_SUFFICIENT / INVALID_VALUE
// answers, all passed back unchanged. Only the pointer it returns is looked up among the
// real functions of hooked symbols (exact exported names); if it is one, the hook of that
// exact symbol replaces it. No name guessing, so no wrong-ABI substitution.
#include "hook/driver/driver.h"
#include "hook/memory/quota.h"

using namespace cuslice;

namespace {

inline void route(void** pfn) {
  if (pfn != nullptr && *pfn != nullptr)
    if (void* hook = hook_for_real(*pfn)) *pfn = hook;
}

}  // namespace

extern "C" {

CUSLICE_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                                   cuuint64_t flags, CUdriverProcAddressQueryResult* symbolStatus) {
  auto fn = real<Sym::cuGetProcAddress_v2>();
  if (fn == nullptr) return unavailable_result();
  const CUresult r = fn(symbol, pfn, cudaVersion, flags, symbolStatus);
  if (r == CUDA_SUCCESS) route(pfn);
  return r;
}

CUSLICE_EXPORT CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  auto fn = real<Sym::cuGetProcAddress>();
  if (fn == nullptr) return unavailable_result();
  const CUresult r = fn(symbol, pfn, cudaVersion, flags);
  if (r == CUDA_SUCCESS) route(pfn);
  return r;
}

// Initialisation: a quota that cannot be read fails here (cuda_ready() is false), so the
// application never runs unlimited by mistake.
CUSLICE_EXPORT CUresult CUDAAPI cuInit(unsigned int Flags) {
  auto fn = real<Sym::cuInit>();
  if (fn == nullptr) return unavailable_result();
  const CUresult r = fn(Flags);
  if (r == CUDA_SUCCESS && quota::active()) quota::on_cuda_initialised();
  return r;
}

}  // extern "C"
