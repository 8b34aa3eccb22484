// The part of the NVIDIA kernel driver's resource-manager (RM) interface cuslice uses: the
// ioctl that reads a GPU's process list, and the allocation, freeing and time-slice controls
// of channel groups. What the hook filters and follows (rm_control_hooks.cpp,
// channel_groups.cpp) and what the tests' stand-in for the kernel answers
// (tests/fake_driver/rm). The one place these declarations live.
//
// Our own minimal declarations, written from the public ABI in NVIDIA's open-gpu-kernel-modules
// (MIT): names follow NVIDIA's, layouts are pinned below.
//   kernel-open/common/inc/nv-ioctl-numbers.h   NV_IOCTL_MAGIC 'F', NV_IOCTL_BASE 200,
//                                               NV_ESC_IOCTL_XFER_CMD = NV_IOCTL_BASE + 11
//   kernel-open/common/inc/nv-ioctl.h           nv_ioctl_xfer_t {cmd, size, ptr (8-aligned)}
//   src/nvidia/arch/nvalloc/unix/include/nv_escape.h   NV_ESC_RM_CONTROL 0x2A
//   src/common/sdk/nvidia/inc/nvos.h            NVOS54_PARAMETERS (the RM control block),
//                                               NVOS54_FLAGS_FINN_SERIALIZED 0x4;
//                                               NVOS21/NVOS64_PARAMETERS (an allocation),
//                                               NVOS00_PARAMETERS (a free)
//   src/nvidia/arch/nvalloc/unix/include/nv_escape.h   NV_ESC_RM_FREE 0x29, NV_ESC_RM_ALLOC 0x2B
//   src/common/sdk/nvidia/inc/class/cla06c.h    KEPLER_CHANNEL_GROUP_A 0xa06c (a channel group:
//                                               the unit the GPU time-slices between)
//   src/common/sdk/nvidia/inc/ctrl/ctrla06c.h   NVA06C_CTRL_CMD_SET_TIMESLICE 0xa06c0103,
//                                               _GET_TIMESLICE 0xa06c0104, {NvU64 timesliceUs}
//   src/common/sdk/nvidia/inc/ctrl/ctrl2080/ctrl2080gpu.h   NV2080_CTRL_CMD_GPU_GET_PIDS
//                                               0x2080018d, its params, _MAX_COUNT 950;
//                                               NV2080_CTRL_CMD_GPU_GET_PID_INFO 0x2080018e
//
// How the kernel reads a request (kernel-open/nvidia/nv.c, nvidia_ioctl): it dispatches on
// _IOC_NR(request) alone and copies _IOC_SIZE(request) bytes of the argument; the direction
// bits are not looked at, and the kernel's `cmd` is 32 bits wide. A request of
// NV_ESC_IOCTL_XFER_CMD instead carries {escape, size, pointer} for blocks too big for the
// size field. RM then requires an RM control block of exactly sizeof(NVOS54_PARAMETERS), on
// the control device /dev/nvidiactl (src/nvidia/arch/nvalloc/unix/src/escape.c, RmIoctl), and
// reports the control's own outcome in the block's `status` (NV_OK = 0), not in the ioctl's
// return value. `params` points to the control's parameter struct, `paramsSize` bytes, which
// RM copies in and back out; with NVOS54_FLAGS_FINN_SERIALIZED it is a serialized blob instead.
//
// x86-64 (LP64) only, like the hook: NvP64 is a 64-bit field, 8-byte aligned, everywhere.
#pragma once

#include <linux/ioctl.h>

#include <cstddef>
#include <cstdint>

namespace cuslice::rm {

inline constexpr unsigned kIoctlMagic = 'F';
inline constexpr unsigned kIoctlBase = 200;
inline constexpr unsigned kEscIoctlXferCmd = kIoctlBase + 11;
inline constexpr unsigned kEscRmControl = 0x2A;
inline constexpr unsigned kEscRmFree = 0x29;
inline constexpr unsigned kEscRmAlloc = 0x2B;

inline constexpr uint32_t kOk = 0;                      // NV_OK
inline constexpr uint32_t kFlagFinnSerialized = 0x4;    // NVOS54_FLAGS_FINN_SERIALIZED
inline constexpr uint32_t kCmdGpuGetPids = 0x2080018d;  // NV2080_CTRL_CMD_GPU_GET_PIDS
inline constexpr uint32_t kCmdGpuGetPidInfo = 0x2080018e;  // NV2080_CTRL_CMD_GPU_GET_PID_INFO
inline constexpr uint32_t kGetPidsMaxCount = 950;       // NV2080_CTRL_GPU_GET_PIDS_MAX_COUNT
inline constexpr uint32_t kClassChannelGroup = 0xa06c;  // KEPLER_CHANNEL_GROUP_A
inline constexpr uint32_t kCmdSetTimeslice = 0xa06c0103;  // NVA06C_CTRL_CMD_SET_TIMESLICE
inline constexpr uint32_t kCmdGetTimeslice = 0xa06c0104;  // NVA06C_CTRL_CMD_GET_TIMESLICE

// nv_ioctl_xfer_t
struct IoctlXfer {
  uint32_t cmd;   // the escape it carries (NV_ESC_*)
  uint32_t size;  // the size of its block
  alignas(8) uint64_t ptr;  // user pointer to the block
};

// NVOS54_PARAMETERS
struct ControlParams {
  uint32_t hClient;
  uint32_t hObject;
  uint32_t cmd;    // NV*_CTRL_CMD_*
  uint32_t flags;  // NVOS54_FLAGS_*
  alignas(8) uint64_t params;  // user pointer to the control's parameter struct
  uint32_t paramsSize;
  uint32_t status;  // [out] NV_STATUS of the control
};

// NV2080_CTRL_GPU_GET_PIDS_PARAMS
struct GetPidsParams {
  uint32_t idType;       // NV2080_CTRL_GPU_GET_PIDS_ID_TYPE_CLASS (0) or _VGPU_GUEST (1)
  uint32_t id;           // a class, e.g. the compute class: processes with such objects
  uint32_t pidTblCount;  // [out] entries of pidTbl in use
  uint32_t pidTbl[kGetPidsMaxCount];  // [out] the pids (the caller's pid namespace)
};

// NVOS21_PARAMETERS: an allocation (the kernel takes this or NVOS64 by the request's size).
struct AllocParams {
  uint32_t hRoot;          // the client
  uint32_t hObjectParent;
  uint32_t hObjectNew;     // the new object's handle
  uint32_t hClass;         // what it is, e.g. kClassChannelGroup
  alignas(8) uint64_t pAllocParms;
  uint32_t paramsSize;
  uint32_t status;         // [out]
};

// NVOS64_PARAMETERS: an allocation with requested access rights (libcuda's).
struct AllocParams64 {
  uint32_t hRoot;
  uint32_t hObjectParent;
  uint32_t hObjectNew;
  uint32_t hClass;
  alignas(8) uint64_t pAllocParms;
  alignas(8) uint64_t pRightsRequested;
  uint32_t paramsSize;
  uint32_t flags;
  uint32_t status;  // [out]
};

// NVOS00_PARAMETERS: a free (of a client, it frees everything the client holds).
struct FreeParams {
  uint32_t hRoot;
  uint32_t hObjectParent;
  uint32_t hObjectOld;
  uint32_t status;  // [out]
};

// NVA06C_CTRL_TIMESLICE_PARAMS
struct TimesliceParams {
  uint64_t timesliceUs;
};

static_assert(sizeof(AllocParams) == 32 && offsetof(AllocParams, status) == 28);
static_assert(sizeof(AllocParams64) == 48 && offsetof(AllocParams64, status) == 40);
static_assert(sizeof(FreeParams) == 16 && sizeof(TimesliceParams) == 8);
static_assert(sizeof(IoctlXfer) == 16 && offsetof(IoctlXfer, ptr) == 8);
static_assert(sizeof(ControlParams) == 32);
static_assert(offsetof(ControlParams, cmd) == 8 && offsetof(ControlParams, flags) == 12);
static_assert(offsetof(ControlParams, params) == 16 && offsetof(ControlParams, paramsSize) == 24 &&
              offsetof(ControlParams, status) == 28);
static_assert(offsetof(GetPidsParams, pidTblCount) == 8 && offsetof(GetPidsParams, pidTbl) == 12);
static_assert(sizeof(GetPidsParams) == 12 + 4 * kGetPidsMaxCount);  // 3812 bytes

// The request numbers as the kernel tells them apart: the low 32 bits, direction bits cleared
// (libcuda and libnvidia-ml send _IOWR, 0xc020462a for an RM control).
inline constexpr uint32_t kRequestMask = ~(static_cast<uint32_t>(_IOC_DIRMASK) << _IOC_DIRSHIFT);
inline constexpr uint32_t kRmControlRequest =
    _IOC(_IOC_NONE, kIoctlMagic, kEscRmControl, sizeof(ControlParams));
inline constexpr uint32_t kXferRequest = _IOC(_IOC_NONE, kIoctlMagic, kEscIoctlXferCmd, sizeof(IoctlXfer));
inline constexpr uint32_t kRmAllocRequest = _IOC(_IOC_NONE, kIoctlMagic, kEscRmAlloc, sizeof(AllocParams));
inline constexpr uint32_t kRmAlloc64Request = _IOC(_IOC_NONE, kIoctlMagic, kEscRmAlloc, sizeof(AllocParams64));
inline constexpr uint32_t kRmFreeRequest = _IOC(_IOC_NONE, kIoctlMagic, kEscRmFree, sizeof(FreeParams));
static_assert(kRmControlRequest == 0x0020462a && kXferRequest == 0x001046d3);
static_assert(kRmAlloc64Request == 0x0030462b && kRmFreeRequest == 0x00104629);

inline constexpr uint32_t request_key(unsigned long request) {
  return static_cast<uint32_t>(request) & kRequestMask;
}

}  // namespace cuslice::rm
