// Joining a scheduler tenant (scheduler_link.h). May call driver, settings, log, gpu_uuid
// and the client; nothing above (the monitor is started by startup.cpp).
#include "hook/link/scheduler_link.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "hook/base/gpu_uuid.h"
#include "hook/base/log.h"
#include "hook/base/settings.h"
#include "hook/driver/driver.h"
#include "hook/link/client.h"
#include "protocol/shm_protocol.h"

namespace cuslice::scheduler_link {
namespace {

bool g_enabled = false;
int g_gpu[kMaxDevices];

void on_event(client::Event event, const char* detail) {
  // The one warning the user gets when the scheduler goes (and a note when it is back).
  if (event == client::Event::kLost)
    CUSLICE_LOG(kWarn, "%s", detail);
  else
    CUSLICE_LOG(kInfo, "%s", detail);
}

// CUSLICE_GPU_INDICES: the node's GPU index of each CUDA device the process sees, in CUDA
// order ("2", "2,5"), as the Kubernetes device plugin gives it: inside a container NVML
// numbers only the GPUs the container sees, from 0, while the scheduler numbers them as the
// node does. Read once, after cuInit. Unset or malformed: 0 (the NVML lookup stands).
int node_gpu_indices(int (&out)[kMaxDevices]) {
  const char* text = std::getenv("CUSLICE_GPU_INDICES");
  if (text == nullptr || *text == '\0') return 0;
  int count = 0, value = -1;
  for (const char* c = text;; ++c) {
    if (*c >= '0' && *c <= '9' && value < 1000) {
      value = (value < 0 ? 0 : value * 10) + (*c - '0');
    } else if ((*c == ',' || *c == '\0') && value >= 0 && count < kMaxDevices) {
      out[count++] = value;
      value = -1;
      if (*c == '\0') return count;
    } else {
      CUSLICE_LOG(kWarn, "CUSLICE_GPU_INDICES=%s is not a list of GPU indices; ignored", text);
      return 0;
    }
  }
}

// Before the driver's cuInit, the only time MPS reads them: the scheduler's MPS server, with
// the tenant's SMs, client priority and memory limit (docs/design/spatial.md). A process
// that names an MPS server of its own stays with it; its tenant then runs side by side with
// the GPU's spatial group (the daemon learns it from the blocker claim after cuInit).
void join_mps() {
  client::MpsSettings m;
  if (!client::mps_settings(m)) return;
  const char* own = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  if (own != nullptr && *own != '\0' && std::strcmp(own, m.pipe_directory) != 0) {
    CUSLICE_LOG(kInfo, "the application names its own MPS server (%s): it stays there", own);
    return;
  }
  char value[16 * 24];
  setenv("CUDA_MPS_PIPE_DIRECTORY", m.pipe_directory, 1);
  std::snprintf(value, sizeof value, "%u", m.sm_percent);
  setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", value, 1);
  setenv("CUDA_MPS_CLIENT_PRIORITY", m.client_priority != 0 ? "1" : "0", 1);
  const int devices = client::spatial_device_count();
  if (m.memory_limit_mib != 0 && devices > 0) {
    // One entry per device ordinal the server shows the process.
    size_t at = 0;
    for (int d = 0; d < devices && at + 24 < sizeof value; ++d)
      at += static_cast<size_t>(std::snprintf(value + at, sizeof value - at, "%s%d=%uM", d ? "," : "", d, m.memory_limit_mib));
    setenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", value, 1);
  }
  CUSLICE_LOG(kInfo, "joining the scheduler's MPS server (%s): %u%% of the SMs", m.pipe_directory, m.sm_percent);
}

}  // namespace

bool start() {
  for (int d = 0; d < kMaxDevices; ++d) g_gpu[d] = d;
  client::set_event_callback(&on_event);
  const char* tenant = std::getenv("CUSLICE_TENANT");
  switch (client::attach()) {
    case client::AttachStatus::kAttached:
      g_enabled = true;
      CUSLICE_LOG(kInfo, "registered with the scheduler");
      join_mps();
      // A process that joins a suspended tenant touches no GPU until the tenant runs again.
      if (client::wait_while_suspended()) CUSLICE_LOG(kInfo, "waited for the tenant to be resumed");
      return true;
    case client::AttachStatus::kRefused:
      CUSLICE_LOG(kError, "%s; CUDA initialisation refused", client::last_error());
      return false;
    case client::AttachStatus::kBusy:
      // Never ungated for want of room: the process fails now and may be started again.
      CUSLICE_LOG(kError, "the scheduler has no room for this process (%s); CUDA initialisation refused",
                  client::last_error());
      return false;
    case client::AttachStatus::kNoDaemon:
    case client::AttachStatus::kFailed:
      if (tenant != nullptr && *tenant != '\0') {
        // Asked for a tenant: charge memory so that a scheduler that comes back counts it.
        g_enabled = true;
        // The name only: a device plugin tenant's credential follows a ':' and stays secret.
        const char* colon = std::strchr(tenant, ':');
        const int shown = colon ? static_cast<int>(colon - tenant) : static_cast<int>(std::strlen(tenant));
        CUSLICE_LOG(kWarn, "tenant '%.*s' asked for, but %s: compute ungated, memory on local limits",
                    shown, tenant, client::last_error());
      }
      return true;
  }
  return true;
}

bool enabled() { return g_enabled; }

int gpu(int device) { return device >= 0 && device < kMaxDevices ? g_gpu[device] : device; }

namespace {

// The driver's and NVML's functions that say which GPU a device is and what it holds,
// looked up once per start.
struct DeviceQueries {
  using GetUuid = CUresult (*)(CUuuid*, CUdevice);
  using ByUuid = nvmlReturn_t (*)(const char*, nvmlDevice_t*);
  using Index = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*);
  using Init = nvmlReturn_t (*)();
  using Attribute = CUresult (*)(int*, CUdevice_attribute, CUdevice);
  GetUuid get_uuid = reinterpret_cast<GetUuid>(cuda_symbol("cuDeviceGetUuid_v2"));
  PFN_cuDeviceTotalMem_v3020 total = real<Sym::cuDeviceTotalMem_v2>();
  Attribute attribute = reinterpret_cast<Attribute>(cuda_symbol("cuDeviceGetAttribute"));
  Init init = reinterpret_cast<Init>(nvml_symbol("nvmlInit_v2"));
  ByUuid by_uuid = reinterpret_cast<ByUuid>(nvml_symbol("nvmlDeviceGetHandleByUUID"));
  Index index = reinterpret_cast<Index>(nvml_symbol("nvmlDeviceGetIndex"));
  bool nvml = init && by_uuid && index && init() == NVML_SUCCESS;
};

// Device d's node index as NVML numbers it, found by its UUID (unchanged if NVML does not say).
void find_by_uuid(const DeviceQueries& q, const CUuuid& u, int d) {
  char text[kGpuUuidText];
  format_gpu_uuid(u, text);
  nvmlDevice_t h;
  unsigned int i = 0;
  if (q.by_uuid(text, &h) == NVML_SUCCESS && q.index(h, &i) == NVML_SUCCESS) g_gpu[d] = static_cast<int>(i);
}

// What the client says of device d: an MPS client (the driver's checkpoint cannot suspend it
// alone), and the card's memory and UUID.
void describe_device(const DeviceQueries& q, int d, const CUuuid* uuid) {
  int mps = 0;
  if (q.attribute && q.attribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, d) == CUDA_SUCCESS && mps != 0)
    client::note_checkpoint_blocker(shm::ProcessSlot::kUsesMps);
  size_t bytes = 0;
  if (q.total && q.total(&bytes, d) == CUDA_SUCCESS)
    client::set_device(g_gpu[d], bytes, uuid != nullptr ? reinterpret_cast<const unsigned char*>(uuid->bytes) : nullptr);
}

}  // namespace

void on_cuda_initialised(int device_count) {
  if (!g_enabled) return;
  const DeviceQueries q;
  int given[kMaxDevices];
  const int given_count = node_gpu_indices(given);
  for (int d = 0; d < device_count && d < kMaxDevices; ++d) {
    CUuuid u;
    const bool have_uuid = q.get_uuid && q.get_uuid(&u, d) == CUDA_SUCCESS;
    if (d < given_count)
      g_gpu[d] = given[d];
    else if (q.nvml && have_uuid)
      find_by_uuid(q, u, d);
    describe_device(q, d, have_uuid ? &u : nullptr);
  }
}

}  // namespace cuslice::scheduler_link
