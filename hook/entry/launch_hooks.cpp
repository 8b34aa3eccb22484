// Kernel launches: each waits for its tenant's GPU token before the driver gets it. The
// fast path, while the tenant holds the token: a few atomic loads (client::token_acquire)
// and marking the stream for the monitor (activity.cpp). Without a scheduler, or on a
// capturing stream (capture runs nothing), a launch goes straight to the driver; below
// higher-priority tenants only, with its time slices short (activity::sliced()), it goes on
// without the token and is only marked.
#include "hook/driver/driver.h"
#include "hook/link/client.h"
#include "hook/link/scheduler_link.h"
#include "hook/memory/pool_accounting.h"
#include "hook/memory/preemption.h"
#include "hook/memory/quota.h"
#include "hook/monitor/activity.h"
#include "hook/movable/work_hold.h"

using namespace cuslice;

namespace {

bool stream_capturing(CUstream stream, bool per_thread) {
  using IsCapturing = CUresult (*)(CUstream, CUstreamCaptureStatus*);
  static const auto legacy = reinterpret_cast<IsCapturing>(cuda_symbol("cuStreamIsCapturing"));
  static const auto ptsz = reinterpret_cast<IsCapturing>(cuda_symbol("cuStreamIsCapturing_ptsz"));
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  const IsCapturing is = per_thread ? ptsz : legacy;
  return is != nullptr && is(stream, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
}

// Before the launch: waits for room and the token. Returns what to count the launch by
// afterwards (activity::launched); device -1: nothing.
[[gnu::always_inline]] inline activity::Noted gate(CUstream stream, bool per_thread) {
  if (!activity::running()) return {};
  // Asking the driver costs ~20 ns: only while some capture is in progress.
  if (activity::capturing() && stream_capturing(stream, per_thread)) return {};
  const int dev = quota::single_device() ? 0 : quota::current_device();
  if (dev < 0) return {};
  const int gpu = scheduler_link::gpu(dev);
  // The bound and parking apply beside other tenants only: a process alone skips both, and
  // one preempted by its time slices the token too.
  if (activity::bounded()) {
    if (!activity::park(dev, gpu, per_thread && stream == nullptr ? CU_STREAM_PER_THREAD : stream)) {
      activity::wait_for_room(dev);
      client::token_acquire(gpu);
    }
  } else if (!activity::sliced()) {
    client::token_acquire(gpu);
  }
  return activity::note_launch(dev);
}

using activity::kernel_key;

// A cuLaunchKernelEx launch's key: its function and shape, as cuLaunchKernel's.
uintptr_t key(const CUlaunchConfig* c, CUfunction f) {
  return kernel_key(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ, c->sharedMemBytes);
}

// The driver's launch call, through the process's work hold (work_hold.h): once the token is
// had, a launch still waits while the fast suspension moves the process's memory. A launch
// the driver refuses for memory (the module it loads lazily, the kernel's local memory) asks
// for room as an allocation does, and is tried again while room is made.
template <typename Call>
[[gnu::always_inline]] inline CUresult held(Call call) {
  const auto once = [&] {
    const work_hold::Guard guard;
    return call();
  };
  const CUresult r = once();
  if (r != CUDA_ERROR_OUT_OF_MEMORY) [[likely]] return r;
  return preemption::after_launch_out_of_memory(quota::single_device() ? 0 : quota::current_device(), r, once);
}

// Forwards a launch between gate() and activity::launched().
#define CUSLICE_GATED(stream, per_thread, key_expr, call)                                        \
  const activity::Noted noted_ = gate(stream, per_thread);                                       \
  const CUresult r_ = held([&] { return call; });                                                \
  if (noted_.device >= 0) activity::launched(noted_, stream, activity::bounded() ? (key_expr) : 0); \
  return r_

// cuLaunchKernelEx and its per-thread twin (`S`, on the per-thread default stream if
// `kPerThread`). Without a configuration there is no stream to gate: the driver refuses it.
template <Sym S, bool kPerThread>
[[gnu::always_inline]] inline CUresult launch_kernel_ex(const CUlaunchConfig* config, CUfunction f, void** params,
                                                        void** extra) {
  auto fn = real<S>();
  if (fn == nullptr) return unavailable_result();
  if (config == nullptr) return fn(config, f, params, extra);
  CUSLICE_GATED(config->hStream, kPerThread, key(config, f), fn(config, f, params, extra));
}

}  // namespace

extern "C" {

CUSLICE_EXPORT CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                              unsigned int bx, unsigned int by, unsigned int bz,
                                              unsigned int shared, CUstream stream, void** params, void** extra) {
  auto fn = real<Sym::cuLaunchKernel>();
  if (fn == nullptr) return unavailable_result();
  CUSLICE_GATED(stream, false, kernel_key(f, gx, gy, gz, bx, by, bz, shared),
                fn(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra));
}

CUSLICE_EXPORT CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                                   unsigned int bx, unsigned int by, unsigned int bz,
                                                   unsigned int shared, CUstream stream, void** params,
                                                   void** extra) {
  auto fn = real<Sym::cuLaunchKernel_ptsz>();
  if (fn == nullptr) return unavailable_result();
  CUSLICE_GATED(stream, true, kernel_key(f, gx, gy, gz, bx, by, bz, shared),
                fn(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra));
}

CUSLICE_EXPORT CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                                                void** extra) {
  return launch_kernel_ex<Sym::cuLaunchKernelEx, false>(config, f, params, extra);
}

CUSLICE_EXPORT CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                                                     void** extra) {
  return launch_kernel_ex<Sym::cuLaunchKernelEx_ptsz, true>(config, f, params, extra);
}

CUSLICE_EXPORT CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                                         unsigned int gz, unsigned int bx, unsigned int by,
                                                         unsigned int bz, unsigned int shared, CUstream stream,
                                                         void** params) {
  auto fn = real<Sym::cuLaunchCooperativeKernel>();
  if (fn == nullptr) return unavailable_result();
  CUSLICE_GATED(stream, false, kernel_key(f, gx, gy, gz, bx, by, bz, shared),
                fn(f, gx, gy, gz, bx, by, bz, shared, stream, params));
}

CUSLICE_EXPORT CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                                              unsigned int gz, unsigned int bx, unsigned int by,
                                                              unsigned int bz, unsigned int shared,
                                                              CUstream stream, void** params) {
  auto fn = real<Sym::cuLaunchCooperativeKernel_ptsz>();
  if (fn == nullptr) return unavailable_result();
  CUSLICE_GATED(stream, true, kernel_key(f, gx, gy, gz, bx, by, bz, shared),
                fn(f, gx, gy, gz, bx, by, bz, shared, stream, params));
}

// The pre-CUDA-4 launch API (default stream).
CUSLICE_EXPORT CUresult CUDAAPI cuLaunch(CUfunction f) {
  auto fn = real<Sym::cuLaunch>();
  if (fn == nullptr) return unavailable_result();
  CUSLICE_GATED(nullptr, false, kernel_key(f, 0, 0, 0, 0, 0, 0, 0), fn(f));
}

CUSLICE_EXPORT CUresult CUDAAPI cuLaunchGrid(CUfunction f, int grid_width, int grid_height) {
  auto fn = real<Sym::cuLaunchGrid>();
  if (fn == nullptr) return unavailable_result();
  CUSLICE_GATED(nullptr, false, kernel_key(f, grid_width, grid_height, 1, 0, 0, 0, 0), fn(f, grid_width, grid_height));
}

CUSLICE_EXPORT CUresult CUDAAPI cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height, CUstream stream) {
  auto fn = real<Sym::cuLaunchGridAsync>();
  if (fn == nullptr) return unavailable_result();
  CUSLICE_GATED(stream, false, kernel_key(f, grid_width, grid_height, 1, 0, 0, 0, 0),
                fn(f, grid_width, grid_height, stream));
}

#undef CUSLICE_GATED

}  // extern "C"

namespace {

// A graph replays all its kernels with no further launch call: the whole replay is gated.
// Its first launch is also when its memory nodes' reserve appears (pool_accounting.cpp).
// `S` on the per-thread default stream if `kPerThread`.
template <Sym S, bool kPerThread>
[[gnu::always_inline]] inline CUresult graph_launch(CUgraphExec exec, CUstream stream) {
  auto fn = real<S>();
  if (fn == nullptr) return unavailable_result();
  const activity::Noted noted = gate(stream, kPerThread);
  const CUresult r = held([&] { return fn(exec, stream); });
  if (noted.device >= 0) activity::launched(noted, stream, reinterpret_cast<uintptr_t>(exec));
  if (r == CUDA_SUCCESS && quota::active())
    pool_accounting::note_graph_launch(pool_accounting::stream_device(stream, kPerThread));
  return r;
}

// cuStreamEndCapture and its per-thread twin (`S`). The capture is over whether or not it
// succeeded, unless there was none on this stream.
template <Sym S>
CUresult end_capture(CUstream s, CUgraph* graph) {
  auto fn = real<S>();
  if (fn == nullptr) return unavailable_result();
  const CUresult r = fn(s, graph);
  if (r != CUDA_ERROR_ILLEGAL_STATE && r != CUDA_ERROR_INVALID_HANDLE) activity::end_capture(s);
  return r;
}

}  // namespace

extern "C" {

CUSLICE_EXPORT CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  return graph_launch<Sym::cuGraphLaunch, false>(hGraphExec, hStream);
}

CUSLICE_EXPORT CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  return graph_launch<Sym::cuGraphLaunch_ptsz, true>(hGraphExec, hStream);
}

// Capture: while one is in progress the monitor records on no stream (activity.h).
#define CUSLICE_BEGIN_CAPTURE(name, params, args)                  \
  CUSLICE_EXPORT CUresult CUDAAPI name params {                    \
    auto fn = real<Sym::name>();                                   \
    if (fn == nullptr) return unavailable_result();                \
    activity::begin_capture(s);                                    \
    const CUresult r = fn args;                                    \
    if (r != CUDA_SUCCESS) activity::end_capture(s);               \
    return r;                                                      \
  }
CUSLICE_BEGIN_CAPTURE(cuStreamBeginCapture, (CUstream s), (s))  // CUDA 10.0 ABI: no mode
CUSLICE_BEGIN_CAPTURE(cuStreamBeginCapture_ptsz, (CUstream s), (s))
CUSLICE_BEGIN_CAPTURE(cuStreamBeginCapture_v2, (CUstream s, CUstreamCaptureMode m), (s, m))
CUSLICE_BEGIN_CAPTURE(cuStreamBeginCapture_v2_ptsz, (CUstream s, CUstreamCaptureMode m), (s, m))
CUSLICE_BEGIN_CAPTURE(cuStreamBeginCaptureToGraph,
                      (CUstream s, CUgraph g, const CUgraphNode* deps, const CUgraphEdgeData* edges,
                       size_t n, CUstreamCaptureMode m),
                      (s, g, deps, edges, n, m))
CUSLICE_BEGIN_CAPTURE(cuStreamBeginCaptureToGraph_ptsz,
                      (CUstream s, CUgraph g, const CUgraphNode* deps, const CUgraphEdgeData* edges,
                       size_t n, CUstreamCaptureMode m),
                      (s, g, deps, edges, n, m))
#undef CUSLICE_BEGIN_CAPTURE

CUSLICE_EXPORT CUresult CUDAAPI cuStreamEndCapture(CUstream s, CUgraph* graph) {
  return end_capture<Sym::cuStreamEndCapture>(s, graph);
}

CUSLICE_EXPORT CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream s, CUgraph* graph) {
  return end_capture<Sym::cuStreamEndCapture_ptsz>(s, graph);
}

CUSLICE_EXPORT CUresult CUDAAPI cuStreamDestroy_v2(CUstream s) {
  auto fn = real<Sym::cuStreamDestroy_v2>();
  if (fn == nullptr) return unavailable_result();
  activity::forget_stream(s);
  return fn(s);
}

}  // extern "C"
