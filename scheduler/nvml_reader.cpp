// NvmlReader: dlopen of libnvidia-ml.so.1 and the three queries the watchdog needs. NVML's
// declarations come from hook/nvml_api.h, the one place they live.
#include "nvml_reader.h"

#include <dlfcn.h>

#include "nvml_api.h"

namespace cuslice {

struct NvmlReader::Api {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  nvmlReturn_t (*count)(unsigned int*);
  nvmlReturn_t (*by_index)(unsigned int, nvmlDevice_t*);
  nvmlReturn_t (*running)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*);
  const char* (*error_string)(nvmlReturn_t);
};

namespace {

template <typename F>
bool resolve(void* library, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(library, name));
  return *out != nullptr;
}

}  // namespace

NvmlReader::NvmlReader() {
  library_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library_ == nullptr) {
    const char* why = dlerror();
    unavailable_ = std::string("cannot load libnvidia-ml.so.1: ") + (why ? why : "unknown error");
    return;
  }
  auto* api = new Api{};
  if (!resolve(library_, "nvmlInit_v2", &api->init) || !resolve(library_, "nvmlShutdown", &api->shutdown) ||
      !resolve(library_, "nvmlDeviceGetCount_v2", &api->count) ||
      !resolve(library_, "nvmlDeviceGetHandleByIndex_v2", &api->by_index) ||
      !resolve(library_, "nvmlDeviceGetComputeRunningProcesses_v3", &api->running)) {
    delete api;
    unavailable_ = "libnvidia-ml.so.1 lacks a function the watchdog needs (driver too old?)";
    return;
  }
  resolve(library_, "nvmlErrorString", &api->error_string);
  if (const nvmlReturn_t rc = api->init(); rc != NVML_SUCCESS) {
    unavailable_ = std::string("nvmlInit failed: ") +
                   (api->error_string ? api->error_string(rc) : std::to_string(static_cast<int>(rc)).c_str());
    delete api;
    return;
  }
  api_ = api;
}

NvmlReader::~NvmlReader() {
  if (api_ != nullptr) api_->shutdown();
  delete api_;
  // The library stays loaded: NVML keeps threads of its own that must not lose their code.
}

std::optional<std::vector<std::vector<DriverProcess>>> NvmlReader::processes(std::string* error) const {
  if (api_ == nullptr) {
    *error = unavailable_;
    return std::nullopt;
  }
  const auto fail = [&](const char* what, nvmlReturn_t rc) {
    *error = std::string(what) + ": " +
             (api_->error_string ? api_->error_string(rc) : std::to_string(static_cast<int>(rc)).c_str());
    return std::nullopt;
  };
  unsigned int count = 0;
  if (nvmlReturn_t rc = api_->count(&count); rc != NVML_SUCCESS) return fail("nvmlDeviceGetCount", rc);
  std::vector<std::vector<DriverProcess>> out(count);
  std::vector<nvmlProcessInfo_t> infos(64);
  for (unsigned int g = 0; g < count; ++g) {
    nvmlDevice_t device = nullptr;
    if (nvmlReturn_t rc = api_->by_index(g, &device); rc != NVML_SUCCESS)
      return fail("nvmlDeviceGetHandleByIndex", rc);
    for (;;) {
      auto n = static_cast<unsigned int>(infos.size());
      const nvmlReturn_t rc = api_->running(device, &n, infos.data());
      if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
        infos.resize(static_cast<size_t>(n) + 16);  // processes may start meanwhile
        continue;
      }
      if (rc != NVML_SUCCESS) return fail("nvmlDeviceGetComputeRunningProcesses", rc);
      for (unsigned int i = 0; i < n; ++i)
        // NVML_VALUE_NOT_AVAILABLE (all ones) where the driver will not say: counted as 0.
        out[g].push_back({static_cast<pid_t>(infos[i].pid), infos[i].usedGpuMemory == ~0ull ? 0 : infos[i].usedGpuMemory});
      break;
    }
  }
  return out;
}

}  // namespace cuslice
