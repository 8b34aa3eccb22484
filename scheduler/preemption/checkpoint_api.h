// The driver's checkpoint API (cuCheckpointProcess*, driver 550 and later), as the daemon calls
// it on tenants' processes. Found at run time: the daemon also runs where there is no NVIDIA
// driver (it then never suspends anybody) and, in tests, against the fake driver, so
// libcuda.so.1 is dlopen'ed when memory preemption is first needed, never linked.
//
// Every call is synchronous and may take seconds (a checkpoint waits for the process's
// submitted work, then copies its memory out): call it off the event loop (tenant_suspender.h).
// Thread-safe: the driver's entry points are.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace cuslice {

class CheckpointApi {
 public:
  enum class State : uint8_t {
    kRunning,
    kLocked,
    kCheckpointed,
    kFailed,  // the driver gave up on the process in a checkpoint or restore
    kGone,    // the driver knows no CUDA process of that pid (exited, or never used CUDA)
  };

  // The outcome of one call: the CUresult and, when it failed, what it was called and means.
  struct Result {
    int code = 0;
    std::string text;  // e.g. "CUDA_ERROR_OUT_OF_MEMORY (out of memory)"; empty on success
    bool ok() const { return code == 0; }
  };
  static constexpr int kOutOfMemory = 2;    // CUDA_ERROR_OUT_OF_MEMORY
  static constexpr int kInvalidValue = 1;   // CUDA_ERROR_INVALID_VALUE: no such process
  static constexpr int kNotSupported = 801;  // CUDA_ERROR_NOT_SUPPORTED
  static constexpr int kNotReady = 600;      // CUDA_ERROR_NOT_READY: a lock's timeout passed

  virtual ~CheckpointApi() = default;

  // Loads `library` (dlopen), finds the checkpoint entry points and calls cuInit(0). Never
  // null: when something is missing, available() is false and why() says what.
  static std::unique_ptr<CheckpointApi> load(const std::string& library = "libcuda.so.1");

  virtual bool available() const = 0;
  virtual const std::string& why() const = 0;

  // timeout_ms 0: wait as long as the process's driver calls in progress take.
  virtual Result lock(int32_t pid, unsigned timeout_ms) = 0;
  virtual Result checkpoint(int32_t pid) = 0;
  virtual Result restore(int32_t pid) = 0;
  virtual Result unlock(int32_t pid) = 0;
  virtual State state(int32_t pid, Result* result = nullptr) = 0;
};

const char* to_string(CheckpointApi::State state);

}  // namespace cuslice
