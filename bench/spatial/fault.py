"""A tenant that faults: after warming up an in-bounds launch of a tiny kernel, it joins the
start barrier (sync.py), waits DELAY seconds past t0, and launches the same kernel at an
address terabytes past its buffer, which the GPU reports as an illegal address. The kernel
comes from cupy.RawKernel when cupy works here, else from Triton (shipped with PyTorch).
Prints one JSON line: the method, and the error the launch or the synchronisation after it
raised ("faulted": false when none came, which makes the scenario meaningless).

    python3 fault.py DELAY
"""
import os
import sys
import time

from sync import Barrier, emit, fail, now

SRC = r'extern "C" __global__ void poke(int* p, long long off) { p[off + threadIdx.x] += 1; }'
FAR = 1 << 40  # elements past the buffer: far outside any allocation


def cupy_poker():
    import cupy as cp
    buf = cp.zeros(64, dtype=cp.int32)
    kernel = cp.RawKernel(SRC, "poke")

    def poke(off):
        kernel((1,), (32,), (buf, cp.int64(off)))
        cp.cuda.runtime.deviceSynchronize()
    poke(0)
    return "cupy.RawKernel", poke


def triton_poker():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def poke_kernel(ptr, off_mib, BLOCK: tl.constexpr):
        # off_mib stays an int32 argument (one compilation); the address is made in 64 bits.
        i = tl.arange(0, BLOCK)
        p = ptr + off_mib.to(tl.int64) * 1048576 + i
        tl.store(p, tl.load(p) + 1)

    buf = torch.zeros(64, dtype=torch.int32, device="cuda")

    def poke(off):
        poke_kernel[(1,)](buf, off // 1048576, BLOCK=32)
        torch.cuda.synchronize()
    poke(0)
    return "triton", poke


def make_poker():
    errors = []
    for maker in (cupy_poker, triton_poker):
        try:
            return maker()
        except Exception as e:  # noqa: BLE001 - the next method is tried
            errors.append(f"{maker.__name__}: {type(e).__name__}: {e}")
    raise RuntimeError("no way to launch a kernel here: " + "; ".join(errors))


def main(delay):
    out = {"worker": "fault", "pid": os.getpid()}
    barrier = Barrier()
    try:
        out["method"], poke = make_poker()
        barrier.arrive()
        while barrier.poll() is None:
            time.sleep(0.01)
    except Exception as e:  # noqa: BLE001
        fail("fault", e, stage="setup")
    while now() < barrier.t0 + delay:
        time.sleep(0.01)
    out["launched_after_s"] = round(now() - barrier.t0, 3)
    try:
        poke(FAR)
        out.update(faulted=False, error=None)
    except Exception as e:  # noqa: BLE001 - the fault is the point
        out.update(faulted=True, error=f"{type(e).__name__}: {str(e).splitlines()[0]}")
    emit(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: fault.py DELAY")
    main(float(sys.argv[1]))
