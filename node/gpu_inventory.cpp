// GpuInventory: the queries behind the node agents' GPU list, on NVML as nvml/nvml_library.h opens
// it. NVML's declarations come from hook/base/nvml_api.h, the one place they live.
#include "node/gpu_inventory.h"

#include <fmt/format.h>

#include "nvml/nvml_library.h"

namespace cuslice::node {

struct GpuInventory::Api {
  std::unique_ptr<nvml::Library> library;
  decltype(&nvmlDeviceGetCount_v2) count = nullptr;
  decltype(&nvmlDeviceGetHandleByIndex_v2) by_index = nullptr;
  decltype(&nvmlDeviceGetUUID) uuid = nullptr;
  decltype(&nvmlDeviceGetName) name = nullptr;
  decltype(&nvmlDeviceGetMemoryInfo) memory = nullptr;
  // Optional: not every NVML (nor the fake) has them.
  decltype(&nvmlSystemGetDriverVersion) driver_version = nullptr;
  decltype(&nvmlDeviceGetMinorNumber) minor = nullptr;
  decltype(&nvmlDeviceGetCudaComputeCapability) capability = nullptr;

  std::string error(nvmlReturn_t rc) const { return library->error_text(rc); }
};

std::unique_ptr<GpuInventory> GpuInventory::open(std::string& why) {
  auto api = std::make_unique<Api>();
  nvml::OpenFailure failure;
  api->library = nvml::Library::open(
      {{"nvmlDeviceGetCount_v2", api->count},
       {"nvmlDeviceGetHandleByIndex_v2", api->by_index},
       {"nvmlDeviceGetUUID", api->uuid},
       {"nvmlDeviceGetName", api->name},
       {"nvmlDeviceGetMemoryInfo", api->memory},
       {"nvmlSystemGetDriverVersion", api->driver_version, nvml::Need::kOptional},
       {"nvmlDeviceGetMinorNumber", api->minor, nvml::Need::kOptional},
       {"nvmlDeviceGetCudaComputeCapability", api->capability, nvml::Need::kOptional}},
      failure);
  if (api->library == nullptr) {
    switch (failure.step) {
      case nvml::OpenFailure::Step::kLoad:
        why = fmt::format("cannot load libnvidia-ml.so.1 (is the NVIDIA driver installed and visible?): {}",
                          failure.detail);
        break;
      case nvml::OpenFailure::Step::kResolve:
        why = "libnvidia-ml.so.1 lacks a function the plugin needs "
              "(an NVML older than the driver API it was built for)";
        break;
      case nvml::OpenFailure::Step::kInit: why = failure.text(); break;
    }
    return nullptr;
  }
  return std::unique_ptr<GpuInventory>(new GpuInventory(std::move(api)));
}

GpuInventory::GpuInventory(std::unique_ptr<Api> api) : api_(std::move(api)) {}

GpuInventory::~GpuInventory() = default;

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
    GpuInfo gpu{i, uuid, name, memory.total, std::nullopt, std::nullopt};
    unsigned int minor = 0;
    if (api_->minor && api_->minor(device, &minor) == NVML_SUCCESS) gpu.minor = minor;
    int major = 0, cc_minor = 0;
    if (api_->capability && api_->capability(device, &major, &cc_minor) == NVML_SUCCESS)
      gpu.compute_capability = std::make_pair(major, cc_minor);
    out.push_back(std::move(gpu));
  }
  return out;
}

}  // namespace cuslice::node
