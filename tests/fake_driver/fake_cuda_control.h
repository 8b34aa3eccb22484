/* Test-control API of the fake libcuda.so.1: what a test of the interposer asks the double to
 * learn the truth (what the simulated device really holds) or to start over.
 *
 * Who uses it: tests, and the fake libnvidia-ml.so.1 (which reads the device state through it,
 * never through cu* entry points, so an interposer's hooks never see NVML's reads).
 * Who must not: the interposer itself; the real driver has none of these names.
 *
 * Contract, for every function here:
 *   - callable at any time, from any thread, with or without cuInit;
 *   - a device index outside [0, fake_cuda_device_count()) reads as 0 / does nothing;
 *   - memory is counted per process ("this process") and per device ("all processes"); the
 *     devices (their memory, their timeline: when each is free, how much kernel time it ran)
 *     are shared by every process naming the same FAKE_CUDA_SHARED_DEVICE, and per process
 *     otherwise ("all processes" below). */
#ifndef CUSLICE_TESTS_FAKE_DRIVER_FAKE_CUDA_CONTROL_H
#define CUSLICE_TESTS_FAKE_DRIVER_FAKE_CUDA_CONTROL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where device memory held by this process comes from. */
typedef enum fake_cuda_charge {
  FAKE_CUDA_CHARGE_CONTEXT = 0,   /* each live context: FAKE_CUDA_CONTEXT_BYTES */
  FAKE_CUDA_CHARGE_MODULE,        /* lazy module loading at the first launch: FAKE_CUDA_MODULE_BYTES */
  FAKE_CUDA_CHARGE_ALLOCATION,    /* cuMemAlloc*, cuMemAllocPitch*, cuMemAllocManaged */
  FAKE_CUDA_CHARGE_POOL_RESERVE,  /* reserve of stream-ordered pools (RESERVED_MEM_CURRENT) */
  FAKE_CUDA_CHARGE_ARRAY,         /* CUDA arrays and mipmapped arrays */
  FAKE_CUDA_CHARGE_VMM,           /* cuMemCreate physical memory on a device */
  FAKE_CUDA_CHARGE_GRAPH,         /* graph memory pool reserve (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) */
  FAKE_CUDA_CHARGE_COUNT
} fake_cuda_charge;

/* Number of simulated devices (FAKE_CUDA_DEVICE_COUNT). */
int fake_cuda_device_count(void);

/* Device memory size (FAKE_CUDA_DEVICE_MEMORY). */
size_t fake_cuda_device_total(int dev);

/* Device memory this process holds on dev, all charges together, and by one charge. */
size_t fake_cuda_device_used(int dev);
size_t fake_cuda_device_used_by(int dev, fake_cuda_charge charge);

/* Device memory all processes sharing dev hold on it (what cuMemGetInfo's free is taken from). */
size_t fake_cuda_device_used_all(int dev);

/* Device memory the process pid holds on dev (0 while it is checkpointed, or for a pid that does
 * not use the device), and the bytes of dev its checkpoint keeps in host memory. */
size_t fake_cuda_process_used(int pid, int dev);
size_t fake_cuda_process_checkpointed(int pid, int dev);

/* The processes (live, sharing dev) that hold memory on dev and what each holds, at most max
 * of them, written to pids and bytes; returns how many. */
int fake_cuda_device_processes(int dev, int* pids, size_t* bytes, int max);

/* Threads of pid inside a driver call a checkpoint lock waits for, and the pid of the process
 * running a checkpoint operation (lock, checkpoint, restore) on pid; 0 when none. */
int fake_cuda_process_active_calls(int pid);
int fake_cuda_process_operation(int pid);

/* The 16 bytes cuDeviceGetUuid_v2 returns for dev; out untouched for an unknown device. */
void fake_cuda_device_uuid(int dev, unsigned char out[16]);

/* Writes the name cuDeviceGetName returns, NUL-terminated, truncated to len bytes. */
void fake_cuda_device_name(int dev, char* name, size_t len);

/* Calls of cuGetProcAddress and cuGetProcAddress_v2 (whatever their outcome). */
int fake_cuda_proc_address_calls(void);

/* Successful kernel launches: cuLaunchKernel*, cuLaunchKernelEx*, cuLaunchCooperativeKernel*. */
unsigned long long fake_cuda_launch_count(void);

/* Faults in this process: contexts poisoned under FAKE_CUDA_FAULT_ON_UNMAPPED because a kernel
 * (cuLaunchKernel*, cuLaunchKernelEx*, cuLaunchCooperativeKernel*, cuGraphLaunch*, or a kernel
 * held behind a stream wait when it ran) or a held copy ran while VMM memory of the process was
 * unmapped, and by an mps_fault* kernel in an MPS client. Each is also reported on stderr, one
 * line beginning "fake libcuda: fault:". */
unsigned long long fake_cuda_faults(void);

/* Simulated kernel time (ns) this process has placed on any device: kernels and graph
 * launches, counted at launch (work still queued included; synchronise first to count only
 * finished work). */
unsigned long long fake_cuda_busy_ns(void);

/* Simulated kernel time (ns) placed on dev by all processes, and the number of kernels (a graph
 * launch counts as one). Counted at launch, as fake_cuda_busy_ns. */
unsigned long long fake_cuda_device_busy_ns(int dev);
unsigned long long fake_cuda_device_kernels(int dev);

/* CLOCK_MONOTONIC nanoseconds at which dev has finished everything queued on it by all
 * processes (in the past when it is idle). */
long long fake_cuda_device_free_at_ns(int dev);

/* What this process is as an MPS client (README.md, "MPS"): the settings cuInit read from
 * CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, CUDA_MPS_CLIENT_PRIORITY, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
 * and CUDA_MPS_PIPE_DIRECTORY, and the generation of the control daemon's server it connected
 * to. Everything is zero (the percentage 100) in a process that is not a client: before cuInit,
 * without CUDA_MPS_PIPE_DIRECTORY, or after fake_cuda_reset. */
typedef struct fake_cuda_mps_client_info {
  int connected;
  int active_thread_percentage; /* 100 when unset */
  int client_priority;
  unsigned long long pinned_limit[16]; /* bytes per ordinal, 0: none */
  char pipe_directory[256];
  unsigned long long server_generation;
} fake_cuda_mps_client_info;

/* 1 when this process is an MPS client (and fills *out when out is not null), else 0. */
int fake_cuda_mps_client(fake_cuda_mps_client_info* out);

/* Drops every object and charge, forgets cuInit (an MPS client disconnects: the next cuInit
 * connects again), zeroes the process's counters and reads the FAKE_CUDA_* environment again (mapping the FAKE_CUDA_SHARED_DEVICE it now names, which keeps
 * what other processes put there: only unlinking the object starts a shared timeline afresh).
 * For single-threaded test set-up: other threads' current contexts are forgotten as well (they
 * see no current context afterwards). */
void fake_cuda_reset(void);

#ifdef __cplusplus
}
#endif

#endif
