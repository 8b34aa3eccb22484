// The driver functions the launch monitor calls that are not hooked (events, capture state,
// stream memory operations, host registration), looked up once at start(). The hooks' own
// table (driver.h) holds only hooked symbols; these are called on the driver directly, so that
// the monitor's calls never pass through the hook.
//
// May call driver.h (cuda_function) only.
#pragma once

#include "hook/base/cuda_api.h"

namespace cuslice::activity {

struct MonitorDriver {
  CUresult (*event_create)(CUevent*, unsigned int);
  CUresult (*event_record)(CUevent, CUstream);
  CUresult (*event_query)(CUevent);
  CUresult (*event_destroy)(CUevent);
  CUresult (*ctx_set)(CUcontext);
  CUresult (*ctx_get)(CUcontext*);
  CUresult (*is_capturing)(CUstream, CUstreamCaptureStatus*);
  CUresult (*exchange_mode)(CUstreamCaptureMode*);
  CUresult (*wait_value)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  CUresult (*write_value)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  CUresult (*host_register)(void*, size_t, unsigned int);
  CUresult (*host_device_pointer)(CUdeviceptr*, void*, unsigned int);
};

// Looks the functions up (slow: once, from start()). False when the events, contexts or
// capture queries are missing: the monitor cannot run.
bool load_monitor_driver();
// Whether the stream memory operations and host registration that parking needs are there.
bool monitor_driver_can_park();

}  // namespace cuslice::activity
