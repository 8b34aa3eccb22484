"""What each framework holds on the device before any big allocation (native, no hook).

    python3 probe_frameworks.py torch|jax|jax-prealloc|cupy

Prints one line per stage: this pid's used_memory per nvidia-smi (MiB), and what the framework
itself reports.
"""
import os
import subprocess
import sys


def smi_used_mib():
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=False).stdout
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(os.getpid()):
            return int(parts[1])
    return -1


def stage(fw, what, extra=""):
    print(f"  {fw:13s} {what:44s} smi={smi_used_mib():6d} MiB  {extra}", flush=True)


def torch_probe():
    import torch
    stage("torch", "import torch")
    torch.zeros(1, device="cuda")
    free, total = torch.cuda.mem_get_info()
    stage("torch", "torch.zeros(1, device='cuda')",
          f"reserved={torch.cuda.memory_reserved() >> 20} MiB mem_get_info total={total >> 20} MiB "
          f"props.total={torch.cuda.get_device_properties(0).total_memory >> 20} MiB")
    a = torch.randn(1024, 1024, device="cuda")
    (a @ a).sum().item()
    stage("torch", "fp32 1024^2 matmul (cuBLAS init)", f"reserved={torch.cuda.memory_reserved() >> 20} MiB")
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    (b @ b).float().sum().item()
    stage("torch", "bf16 4096^2 matmul", f"reserved={torch.cuda.memory_reserved() >> 20} MiB")


def jax_probe(prealloc):
    if not prealloc:
        os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    import jax
    import jax.numpy as jnp
    name = "jax-prealloc" if prealloc else "jax(no-prealloc)"
    stage(name, "import jax")
    jnp.ones(1).block_until_ready()
    stats = jax.devices()[0].memory_stats() or {}
    stage(name, "jnp.ones(1).block_until_ready()",
          f"bytes_limit={stats.get('bytes_limit', 0) >> 20} MiB in_use={stats.get('bytes_in_use', 0) >> 20} MiB")
    x = jnp.ones((2048, 2048), dtype=jnp.float32)
    (x @ x).block_until_ready()
    stage(name, "2048^2 matmul")


def cupy_probe():
    import cupy
    stage("cupy", "import cupy")
    cupy.ones(1)
    cupy.cuda.Device().synchronize()
    free, total = cupy.cuda.runtime.memGetInfo()
    stage("cupy", "cupy.ones(1)", f"pool={cupy.get_default_memory_pool().total_bytes() >> 20} MiB total={total >> 20} MiB")
    a = cupy.ones((1024, 1024), dtype=cupy.float32)
    float((a @ a).sum())
    stage("cupy", "1024^2 matmul (cuBLAS init)", f"pool={cupy.get_default_memory_pool().total_bytes() >> 20} MiB")


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "torch"
    {"torch": torch_probe, "jax": lambda: jax_probe(False), "jax-prealloc": lambda: jax_probe(True),
     "cupy": cupy_probe}[which]()
