#include "scheduler/preemption/checkpoint_api.h"

#include <cuda.h>
#include <dlfcn.h>

namespace cuslice {
namespace {

class DriverCheckpointApi final : public CheckpointApi {
 public:
  explicit DriverCheckpointApi(const std::string& library) {
    handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* error = dlerror();
      why_ = "cannot load " + library + ": " + (error != nullptr ? error : "unknown error");
      return;
    }
    if (!find(init_, "cuInit") || !find(lock_, "cuCheckpointProcessLock") ||
        !find(checkpoint_, "cuCheckpointProcessCheckpoint") || !find(restore_, "cuCheckpointProcessRestore") ||
        !find(unlock_, "cuCheckpointProcessUnlock") || !find(state_, "cuCheckpointProcessGetState")) {
      return;
    }
    find(error_name_, "cuGetErrorName");  // optional: only for messages
    find(error_string_, "cuGetErrorString");
    const Result init = call(init_(0));
    if (!init.ok()) {
      why_ = "cuInit failed: " + init.text;
      return;
    }
    available_ = true;
  }

  ~DriverCheckpointApi() override {
    // Not dlclose'd: the driver's own threads may outlive this object.
  }

  bool available() const override { return available_; }
  const std::string& why() const override { return why_; }

  Result lock(int32_t pid, unsigned timeout_ms) override {
    if (!available_) return unavailable();
    CUcheckpointLockArgs args{};
    args.timeoutMs = timeout_ms;
    return call(lock_(pid, &args));
  }
  Result checkpoint(int32_t pid) override {
    if (!available_) return unavailable();
    return call(checkpoint_(pid, nullptr));
  }
  Result restore(int32_t pid) override {
    if (!available_) return unavailable();
    return call(restore_(pid, nullptr));
  }
  Result unlock(int32_t pid) override {
    if (!available_) return unavailable();
    return call(unlock_(pid, nullptr));
  }
  State state(int32_t pid, Result* result) override {
    CUprocessState s = CU_PROCESS_STATE_RUNNING;
    const Result r = available_ ? call(state_(pid, &s)) : unavailable();
    if (result != nullptr) *result = r;
    if (r.code == kInvalidValue) return State::kGone;
    if (!r.ok()) return State::kFailed;
    switch (s) {
      case CU_PROCESS_STATE_RUNNING: return State::kRunning;
      case CU_PROCESS_STATE_LOCKED: return State::kLocked;
      case CU_PROCESS_STATE_CHECKPOINTED: return State::kCheckpointed;
      default: return State::kFailed;
    }
  }

 private:
  template <class Function>
  bool find(Function& function, const char* name) {
    function = reinterpret_cast<Function>(dlsym(handle_, name));
    if (function == nullptr) why_ = std::string("the driver has no ") + name + " (the checkpoint API needs driver 550 or later)";
    return function != nullptr;
  }

  Result unavailable() const { return {static_cast<int>(CUDA_ERROR_NOT_SUPPORTED), why_}; }

  Result call(CUresult rc) const {
    Result r;
    r.code = static_cast<int>(rc);
    if (rc == CUDA_SUCCESS) return r;
    const char* name = nullptr;
    const char* text = nullptr;
    if (error_name_ != nullptr) error_name_(rc, &name);
    if (error_string_ != nullptr) error_string_(rc, &text);
    r.text = name != nullptr ? name : "CUresult " + std::to_string(r.code);
    if (text != nullptr) r.text += std::string(" (") + text + ")";
    return r;
  }

  void* handle_ = nullptr;
  bool available_ = false;
  std::string why_;
  CUresult (*init_)(unsigned int) = nullptr;
  CUresult (*lock_)(int, CUcheckpointLockArgs*) = nullptr;
  CUresult (*checkpoint_)(int, CUcheckpointCheckpointArgs*) = nullptr;
  CUresult (*restore_)(int, CUcheckpointRestoreArgs*) = nullptr;
  CUresult (*unlock_)(int, CUcheckpointUnlockArgs*) = nullptr;
  CUresult (*state_)(int, CUprocessState*) = nullptr;
  CUresult (*error_name_)(CUresult, const char**) = nullptr;
  CUresult (*error_string_)(CUresult, const char**) = nullptr;
};

}  // namespace

std::unique_ptr<CheckpointApi> CheckpointApi::load(const std::string& library) {
  return std::make_unique<DriverCheckpointApi>(library);
}

const char* to_string(CheckpointApi::State state) {
  switch (state) {
    case CheckpointApi::State::kRunning: return "running";
    case CheckpointApi::State::kLocked: return "locked";
    case CheckpointApi::State::kCheckpointed: return "checkpointed";
    case CheckpointApi::State::kFailed: return "failed";
    case CheckpointApi::State::kGone: return "gone";
  }
  return "?";
}

}  // namespace cuslice
