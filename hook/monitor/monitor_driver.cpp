// Looks up the launch monitor's driver functions (monitor_driver.h). May call driver.h only.
#include "hook/monitor/monitor_driver.h"

#include "hook/driver/driver.h"
#include "hook/monitor/monitor_state.h"

namespace cuslice::activity {

bool load_monitor_driver() {
  using D = MonitorDriver;
  g_state.drv = D{cuda_function<decltype(D::event_create)>("cuEventCreate"),
            cuda_function<decltype(D::event_record)>("cuEventRecord"),
            cuda_function<decltype(D::event_query)>("cuEventQuery"),
            cuda_function<decltype(D::event_destroy)>("cuEventDestroy_v2"),
            cuda_function<decltype(D::ctx_set)>("cuCtxSetCurrent"),
            cuda_function<decltype(D::ctx_get)>("cuCtxGetCurrent"),
            cuda_function<decltype(D::is_capturing)>("cuStreamIsCapturing"),
            cuda_function<decltype(D::exchange_mode)>("cuThreadExchangeStreamCaptureMode"),
            cuda_function<decltype(D::wait_value)>("cuStreamWaitValue32_v2"),
            cuda_function<decltype(D::write_value)>("cuStreamWriteValue32_v2"),
            cuda_function<decltype(D::host_register)>("cuMemHostRegister_v2"),
            cuda_function<decltype(D::host_device_pointer)>("cuMemHostGetDevicePointer_v2")};
  return g_state.drv.event_create && g_state.drv.event_record && g_state.drv.event_query && g_state.drv.ctx_set && g_state.drv.ctx_get &&
         g_state.drv.is_capturing;
}

bool monitor_driver_can_park() {
  return g_state.drv.wait_value && g_state.drv.write_value && g_state.drv.host_register && g_state.drv.host_device_pointer;
}

}  // namespace cuslice::activity
