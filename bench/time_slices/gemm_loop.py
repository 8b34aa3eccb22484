"""A GEMM loop (8192² bf16 on the GPU, a synchronisation every four) for SECONDS after a
warm-up; prints its GEMMs per second (bench/time_slices/run.sh).

    python3 gemm_loop.py SECONDS
"""
import sys
import time

import torch


def main(seconds):
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    n, t0 = 0, time.time()
    while time.time() - t0 < seconds:
        for _ in range(4):
            a @ b
        torch.cuda.synchronize()
        n += 4
    print(f"gemm: {n / (time.time() - t0):.1f} GEMM/s")


if __name__ == "__main__":
    main(float(sys.argv[1]))
