// The fake libcuda as an MPS client: what cuInit reads from CUDA_MPS_* and learns from the fake
// control daemon (mps/control_daemon.h), and the checks that honour it. It owns the connection
// and the view of the daemon's server generation; device memory limits live in the ledger,
// which it only configures. Never looks at a pipe directory the environment does not name.
//
//   - cuInit with CUDA_MPS_PIPE_DIRECTORY set connects to <dir>/control and sends a hello with
//     the client's settings; no daemon answering there: CUDA_ERROR_MPS_CONNECTION_FAILED.
//   - Once the daemon's server generation moved on (another client faulted, or the daemon
//     stopped), launches, synchronisations and allocations fail with
//     CUDA_ERROR_MPS_CLIENT_TERMINATED.
//   - A kernel named mps_fault* faults: CUDA_ERROR_ILLEGAL_ADDRESS, its context poisoned, and
//     the daemon told that its server ended.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "tests/fake_driver/cuda/knobs.h"

struct CUctx_st;

namespace fake_cuda {

struct DriverState;

struct MpsClient {
  bool connected = false;
  int fd = -1;              // the hello's connection, kept so the daemon sees the client leave
  int thread_percentage = 100;
  int priority = 0;
  std::array<std::uint64_t, kMaxDevices> pinned_limit{};  // bytes per ordinal, 0: none
  std::string pinned_text;  // as given, for the daemon's log
  std::string directory;
  std::uint64_t generation = 0;  // of the server this client connected to
  const std::atomic<std::uint64_t>* published = nullptr;  // the daemon's current generation

  // Whether the server this client belonged to has ended.
  bool terminated() const { return connected && published != nullptr && published->load() != generation; }
  // Closes the connection and forgets everything (fake_cuda_reset).
  void disconnect();
};

// At cuInit (state locked): connects when CUDA_MPS_PIPE_DIRECTORY is set, records the settings
// and sets the pinned limits in the ledger. CUDA_ERROR_MPS_CONNECTION_FAILED without a daemon,
// CUDA_ERROR_INVALID_VALUE for a setting that does not parse (a line on stderr says which).
CUresult mps_connect(DriverState& state);

// CUDA_ERROR_MPS_CLIENT_TERMINATED once the client's server has ended, else CUDA_SUCCESS.
inline CUresult mps_check(const MpsClient& client) {
  return client.terminated() ? CUDA_ERROR_MPS_CLIENT_TERMINATED : CUDA_SUCCESS;
}

// What a launch of kernel `name` in ctx answers under MPS: CUDA_ERROR_MPS_CLIENT_TERMINATED
// once the server ended; for an mps_fault* kernel in a client, CUDA_ERROR_ILLEGAL_ADDRESS after
// poisoning ctx and telling the daemon; otherwise CUDA_SUCCESS (the launch goes on).
CUresult mps_launch(DriverState& state, CUctx_st* ctx, const std::string& name);

// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=4G,1=512M"; units K, M, G, T, binary, or plain bytes) into
// limits; false with *error set when it does not parse.
bool parse_pinned_limits(const std::string& text, std::array<std::uint64_t, kMaxDevices>* limits,
                         std::string* error);

}  // namespace fake_cuda
