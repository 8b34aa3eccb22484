"""A GEMM-bound worker for the spatial benchmark: 8192x8192 fp16 matmuls, a synchronisation
every four. Joins the start barrier (sync.py), keeps multiplying while it waits, and prints
one JSON line with its TFLOP/s over [t0, t0 + SECONDS), or the error that stopped it.

    python3 gemm.py SECONDS
"""
import os
import sys

import torch

from sync import Barrier, emit, fail, now

N = 8192
PER_SYNC = 4


def step(a, b, c):
    for _ in range(PER_SYNC):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()


def main(seconds):
    out = {"worker": "gemm", "pid": os.getpid(), "n": N}
    barrier = Barrier()
    try:
        a = torch.randn(N, N, device="cuda", dtype=torch.float16)
        b = torch.randn_like(a)
        c = torch.empty_like(a)
        step(a, b, c)
        barrier.arrive()
        while barrier.poll() is None:
            step(a, b, c)
        while now() < barrier.t0:
            step(a, b, c)
    except Exception as e:  # noqa: BLE001
        fail("gemm", e, stage="setup")
    gemms, start, end = 0, now(), barrier.t0 + seconds
    try:
        while now() < end:
            step(a, b, c)
            gemms += PER_SYNC
    except Exception as e:  # noqa: BLE001
        out["error"] = f"{type(e).__name__}: {e}"
    elapsed = max(now() - start, 1e-9)
    out.update(gemms=gemms, window_s=round(elapsed, 3),
               tflops=round(gemms * 2 * N**3 / elapsed / 1e12, 2))
    emit(out)
    sys.exit(1 if "error" in out else 0)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: gemm.py SECONDS")
    main(float(sys.argv[1]))
