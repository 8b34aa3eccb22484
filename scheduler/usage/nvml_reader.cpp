// NvmlReader: the queries the watchdog and the card sizes need, on NVML as nvml/nvml_library.h opens it.
// NVML's declarations come from hook/base/nvml_api.h, the one place they live.
#include "scheduler/usage/nvml_reader.h"

#include "nvml/nvml_library.h"

namespace cuslice {

struct NvmlReader::Api {
  std::unique_ptr<nvml::Library> library;
  decltype(&nvmlDeviceGetCount_v2) count = nullptr;
  decltype(&nvmlDeviceGetHandleByIndex_v2) by_index = nullptr;
  decltype(&nvmlDeviceGetComputeRunningProcesses_v3) running = nullptr;
  decltype(&nvmlDeviceGetMemoryInfo) memory = nullptr;  // optional: without it no card size
};

NvmlReader::NvmlReader() {
  auto api = std::make_unique<Api>();
  nvml::OpenFailure failure;
  api->library = nvml::Library::open({{"nvmlDeviceGetCount_v2", api->count},
                                      {"nvmlDeviceGetHandleByIndex_v2", api->by_index},
                                      {"nvmlDeviceGetComputeRunningProcesses_v3", api->running},
                                      {"nvmlDeviceGetMemoryInfo", api->memory, nvml::Need::kOptional}},
                                     failure);
  if (api->library == nullptr) {
    unavailable_ = failure.step == nvml::OpenFailure::Step::kResolve
                       ? "libnvidia-ml.so.1 lacks a function the watchdog needs (driver too old?)"
                       : failure.text();
    return;
  }
  api_ = std::move(api);
}

NvmlReader::~NvmlReader() = default;

std::optional<std::vector<std::vector<DriverProcess>>> NvmlReader::processes(std::string* error) const {
  if (api_ == nullptr) {
    *error = unavailable_;
    return std::nullopt;
  }
  const auto fail = [&](const char* what, nvmlReturn_t rc) {
    *error = std::string(what) + ": " + api_->library->error_text(rc);
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

std::vector<uint64_t> NvmlReader::memory_totals() const {
  std::vector<uint64_t> out;
  unsigned int count = 0;
  if (api_ == nullptr || api_->memory == nullptr || api_->count(&count) != NVML_SUCCESS) return out;
  out.assign(count, 0);
  for (unsigned int g = 0; g < count; ++g) {
    nvmlDevice_t device = nullptr;
    nvmlMemory_t memory{};
    if (api_->by_index(g, &device) == NVML_SUCCESS && api_->memory(device, &memory) == NVML_SUCCESS)
      out[g] = memory.total;
  }
  return out;
}

}  // namespace cuslice
