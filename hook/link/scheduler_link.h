// The hook's link to cuslice-scheduler (hook/link/client.h does the protocol).
//
// At initialisation the hook registers with the scheduler if one answers on its socket.
// Registered, the process is "in a tenant": its memory is also charged to the tenant's quota
// across all the tenant's processes (quota.cpp), and its kernel launches wait for the
// tenant's GPU token (launch_hooks.cpp, activity.cpp). Without a scheduler the hook runs on
// the local limits of CUSLICE_MEMORY_LIMIT and never gates a launch.
//
// Below quota and the monitor, above the driver table: may call driver, settings, log,
// gpu_uuid and the client.
#pragma once

#include <cstdint>

namespace cuslice::scheduler_link {

// Called once from the hook's initialisation (startup.cpp). False only when the scheduler
// refused this process (no tenant for it): CUDA initialisation then fails, with one line
// saying why. enabled() then says whether launches are to be gated.
bool start();

// True when memory must be charged for a scheduler even where no local limit applies: a
// scheduler was reached at start, or CUSLICE_TENANT asked for one (it may come back).
bool enabled();

// The scheduler's index of CUDA device `device` (the GPU's NVML index, which is the same for
// every process whatever its CUDA_VISIBLE_DEVICES), known after cuInit; else the ordinal.
int gpu(int device);
// Learns the mapping and tells the client each device's size (slow path, after cuInit).
void on_cuda_initialised(int device_count);

}  // namespace cuslice::scheduler_link
