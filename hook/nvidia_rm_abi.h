// The part of the NVIDIA kernel driver's resource-manager (RM) interface cuslice uses: the
// ioctl that reads a GPU's process list. What the hook filters (rm_control_hooks.cpp) and
// what the tests' stand-in for the kernel answers (tests/fake_driver/rm). The one place these
// declarations live.
//
// Our own minimal declarations, written from the public ABI in NVIDIA's open-gpu-kernel-modules
// (MIT): names follow NVIDIA's, layouts are pinned below.
//   kernel-open/common/inc/nv-ioctl-numbers.h   NV_IOCTL_MAGIC 'F', NV_IOCTL_BASE 200,
//                                               NV_ESC_IOCTL_XFER_CMD = NV_IOCTL_BASE + 11
//   kernel-open/common/inc/nv-ioctl.h           nv_ioctl_xfer_t {cmd, size, ptr (8-aligned)}
//   src/nvidia/arch/nvalloc/unix/include/nv_escape.h   NV_ESC_RM_CONTROL 0x2A
//   src/common/sdk/nvidia/inc/nvos.h            NVOS54_PARAMETERS (the RM control block),
//                                               NVOS54_FLAGS_FINN_SERIALIZED 0x4
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

inline constexpr uint32_t kOk = 0;                      // NV_OK
inline constexpr uint32_t kFlagFinnSerialized = 0x4;    // NVOS54_FLAGS_FINN_SERIALIZED
inline constexpr uint32_t kCmdGpuGetPids = 0x2080018d;  // NV2080_CTRL_CMD_GPU_GET_PIDS
inline constexpr uint32_t kCmdGpuGetPidInfo = 0x2080018e;  // NV2080_CTRL_CMD_GPU_GET_PID_INFO
inline constexpr uint32_t kGetPidsMaxCount = 950;       // NV2080_CTRL_GPU_GET_PIDS_MAX_COUNT

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
static_assert(kRmControlRequest == 0x0020462a && kXferRequest == 0x001046d3);

inline constexpr uint32_t request_key(unsigned long request) {
  return static_cast<uint32_t>(request) & kRequestMask;
}

}  // namespace cuslice::rm
