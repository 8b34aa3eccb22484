/* Test-control API of the fake resource manager (rm/fake_rm.cpp, libfake_nvidia_rm.so): the
 * stand-in for the NVIDIA kernel driver's RM control ioctl, preloaded AFTER libcuslice.so
 * (LD_PRELOAD=libcuslice.so:libfake_nvidia_rm.so), so that the hook's ioctl reaches it as the
 * next ioctl, as it reaches libc's, and so the kernel, on a GPU machine.
 *
 * What it answers: every RM control request (NV_ESC_RM_CONTROL, direct or wrapped in
 * NV_ESC_IOCTL_XFER_CMD; hook/base/nvidia_rm_abi.h), on any file descriptor, whatever its cmd, is
 * answered with the current answer below: the pid table is written in GET_PIDS's layout into
 * the control's parameter block, as far as its paramsSize holds (nothing when it is smaller
 * than the count field or the pointer is null), the block's status is set, and the ioctl
 * returns the answer's result and errno. Every other request goes to the next ioctl (libc's).
 * Writing the table for any cmd is deliberate: a test sees what the hook did to a control it
 * must leave alone.
 *
 * Channel groups: an allocation of class KEPLER_CHANNEL_GROUP_A (NV_ESC_RM_ALLOC, either
 * parameter layout, on any file descriptor) is kept, with RM's default slice of 1024 us, and
 * answered NV_OK; a free of such a group, or of its client, forgets it. NVA06C SET/GET_TIMESLICE
 * controls act on a kept group (status NV_ERR_INVALID_OBJECT_HANDLE for another) with the
 * status set by fake_rm_set_timeslice_status. Other allocations and frees go to the next ioctl.
 *
 * Who uses it: the hook's tests, through dlsym (the test binaries are not linked against it). */
#ifndef CUSLICE_TESTS_FAKE_DRIVER_FAKE_RM_CONTROL_H
#define CUSLICE_TESTS_FAKE_DRIVER_FAKE_RM_CONTROL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The answer to every later RM control request of this process: `count` pids (at most 950),
 * the RM status to report (0 = NV_OK), and the ioctl's return value with the errno it sets
 * when that is -1. Before the first call: no pids, status 0, result 0. Thread-safe enough for
 * tests: call it while no RM request is in flight. */
void fake_rm_set_answer(const uint32_t* pids, uint32_t count, uint32_t rm_status, int result,
                        int error);
typedef void (*fake_rm_set_answer_fn)(const uint32_t*, uint32_t, uint32_t, int, int);

/* RM control requests answered so far by this process (any cmd). */
unsigned long fake_rm_requests(void);
typedef unsigned long (*fake_rm_requests_fn)(void);

/* A kept group's slice in microseconds; 0 when there is no such group. */
uint64_t fake_rm_timeslice(uint32_t client, uint32_t group);
typedef uint64_t (*fake_rm_timeslice_fn)(uint32_t, uint32_t);

/* SET_TIMESLICE controls that changed a group so far. */
unsigned long fake_rm_timeslice_sets(void);
typedef unsigned long (*fake_rm_timeslice_sets_fn)(void);

/* The status of later time-slice controls on kept groups (0 = NV_OK: they act). */
void fake_rm_set_timeslice_status(uint32_t rm_status);
typedef void (*fake_rm_set_timeslice_status_fn)(uint32_t);

#ifdef __cplusplus
}
#endif

#endif
