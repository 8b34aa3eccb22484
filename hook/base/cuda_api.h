// cuda.h as the hook sees it: every exact exported name declared (cuMemAlloc_v2 and the
// legacy cuMemAlloc, the _ptsz/_ptds twins), so hook definitions are checked against the
// driver's own declarations.
#pragma once

#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <cuda.h>
#include <cudaTypedefs.h>

#include "hook/base/nvml_api.h"

// Hooks are the only symbols the library exports (with dlsym/dlvsym; see libcuslice.map).
#define CUSLICE_EXPORT __attribute__((visibility("default")))
