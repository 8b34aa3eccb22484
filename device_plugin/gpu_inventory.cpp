#include "gpu_inventory.h"

#include <dlfcn.h>

#include <fmt/format.h>

#include "nvml_api.h"

namespace cuslice::device_plugin {

struct GpuInventory::Api {
  decltype(&nvmlInit_v2) init = nullptr;
  decltype(&nvmlShutdown) shutdown = nullptr;
  decltype(&nvmlErrorString) error_string = nullptr;
  decltype(&nvmlDeviceGetCount_v2) count = nullptr;
  decltype(&nvmlDeviceGetHandleByIndex_v2) by_index = nullptr;
  decltype(&nvmlDeviceGetUUID) uuid = nullptr;
  decltype(&nvmlDeviceGetName) name = nullptr;
  decltype(&nvmlDeviceGetMemoryInfo) memory = nullptr;
  decltype(&nvmlSystemGetDriverVersion) driver_version = nullptr;
  // Optional: not every NVML (nor the fake) has it.
  nvmlReturn_t (*minor)(nvmlDevice_t, unsigned int*) = nullptr;

  std::string error(nvmlReturn_t rc) const {
    return error_string ? error_string(rc) : fmt::format("NVML error {}", static_cast<int>(rc));
  }
};

namespace {

template <typename F>
bool resolve(void* library, const char* symbol, F& out) {
  out = reinterpret_cast<F>(dlsym(library, symbol));
  return out != nullptr;
}

}  // namespace

std::unique_ptr<GpuInventory> GpuInventory::open(std::string& why) {
  void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    why = fmt::format("cannot load libnvidia-ml.so.1 (is the NVIDIA driver installed and visible?): {}", dlerror());
    return nullptr;
  }
  auto api = std::make_unique<Api>();
  if (!resolve(library, "nvmlInit_v2", api->init) || !resolve(library, "nvmlShutdown", api->shutdown) ||
      !resolve(library, "nvmlDeviceGetCount_v2", api->count) ||
      !resolve(library, "nvmlDeviceGetHandleByIndex_v2", api->by_index) ||
      !resolve(library, "nvmlDeviceGetUUID", api->uuid) || !resolve(library, "nvmlDeviceGetName", api->name) ||
      !resolve(library, "nvmlDeviceGetMemoryInfo", api->memory)) {
    why = "libnvidia-ml.so.1 lacks a function the plugin needs (an NVML older than the driver API it was built for)";
    dlclose(library);
    return nullptr;
  }
  resolve(library, "nvmlErrorString", api->error_string);
  resolve(library, "nvmlSystemGetDriverVersion", api->driver_version);
  resolve(library, "nvmlDeviceGetMinorNumber", api->minor);
  if (const nvmlReturn_t rc = api->init(); rc != NVML_SUCCESS) {
    why = "nvmlInit failed: " + api->error(rc);
    dlclose(library);
    return nullptr;
  }
  return std::unique_ptr<GpuInventory>(new GpuInventory(library, std::move(api)));
}

GpuInventory::GpuInventory(void* library, std::unique_ptr<Api> api) : library_(library), api_(std::move(api)) {}

GpuInventory::~GpuInventory() {
  api_->shutdown();
  dlclose(library_);
}

std::string GpuInventory::driver_version() const {
  char text[96] = {};
  if (!api_->driver_version || api_->driver_version(text, sizeof text) != NVML_SUCCESS) return "unknown";
  return text;
}

std::optional<std::vector<GpuInfo>> GpuInventory::list(std::vector<std::string>& problems) const {
  unsigned int count = 0;
  if (const nvmlReturn_t rc = api_->count(&count); rc != NVML_SUCCESS) {
    problems.push_back("nvmlDeviceGetCount: " + api_->error(rc));
    return std::nullopt;
  }
  std::vector<GpuInfo> out;
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t device = nullptr;
    char uuid[96] = {}, name[96] = {};
    nvmlMemory_t memory{};
    nvmlReturn_t rc = api_->by_index(i, &device);
    if (rc == NVML_SUCCESS) rc = api_->uuid(device, uuid, sizeof uuid);
    if (rc == NVML_SUCCESS) rc = api_->memory(device, &memory);
    if (rc != NVML_SUCCESS) {
      problems.push_back(fmt::format("GPU {}: {}", i, api_->error(rc)));
      continue;
    }
    if (api_->name(device, name, sizeof name) != NVML_SUCCESS) name[0] = '\0';
    GpuInfo gpu{i, uuid, name, memory.total, std::nullopt};
    unsigned int minor = 0;
    if (api_->minor && api_->minor(device, &minor) == NVML_SUCCESS) gpu.minor = minor;
    out.push_back(std::move(gpu));
  }
  return out;
}

}  // namespace cuslice::device_plugin
