"""Framework workloads the quota must hold for; each prints one `RESULT {json}` line.

    python3 workers.py torch-fill | jax-fill | cupy-fill | torch-graph | torch-noquota

tests/gpu/suite.py runs these under the hook (LD_PRELOAD + CUSLICE_MEMORY_LIMIT) and turns the
RESULT lines into its table. SUITE_QUOTA_MIB is the quota the suite set (MiB). A fill allocates
64 MiB buffers until the framework raises its own out-of-memory error, or until quota + 2 GiB
(a failure: the quota did not hold), reads this pid's used_memory from nvidia-smi (run without
the hook) while holding the peak, frees half, allocates again and computes.
"""
import json
import os
import subprocess
import sys
import traceback

MiB = 1 << 20
STEP = 64 * MiB
QUOTA_MIB = int(os.environ.get("SUITE_QUOTA_MIB", "4096"))
QUOTA = QUOTA_MIB * MiB
CAP = QUOTA + 2048 * MiB
USABLE = QUOTA - 1536 * MiB  # the context, libraries' modules and rounding may take the rest


def smi_used_mib(pid=None):
    """This pid's used_memory per nvidia-smi, run without the hook; -1 when not listed."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "CUSLICE_MEMORY_LIMIT")}
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, env=env, check=False).stdout
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid or os.getpid()):
            return int(parts[1])
    return -1


class Result:
    def __init__(self, scenario):
        self.d = {"scenario": scenario, "quota_mib": QUOTA_MIB, "framework_peak_mib": 0,
                  "smi_peak_mib": -1, "oom": "none", "oom_ok": False, "after_free_ok": False,
                  "checks": {}, "notes": ""}

    def check(self, name, ok):
        self.d["checks"][name] = bool(ok)

    def note(self, text):
        self.d["notes"] += text + "; "

    def __setitem__(self, k, v):
        self.d[k] = v

    def emit(self):
        self.d["pass"] = all(self.d["checks"].values()) and bool(self.d["checks"])
        print("RESULT " + json.dumps(self.d), flush=True)


def guarded(fn):
    """Runs a worker; an unexpected exception still yields a RESULT line (a failing one)."""
    def run(r):
        try:
            fn(r)
        except Exception as e:  # noqa: BLE001 - reported, not hidden
            traceback.print_exc()
            r.check("no unexpected exception", False)
            r.note(f"unexpected {type(e).__name__}: {str(e)[:300]}")
        r.emit()
    return run


def fill(alloc, is_oom, r):
    """alloc() -> a 64 MiB buffer; is_oom(exc) -> True for the framework's own OOM error.
    Returns the held buffers."""
    held = []
    while len(held) * STEP < CAP:
        try:
            held.append(alloc())
        except Exception as e:  # noqa: BLE001 - classified below
            r["oom"] = f"{type(e).__module__}.{type(e).__name__}"
            r["oom_ok"] = bool(is_oom(e))
            if not r.d["oom_ok"]:
                r.note(f"fill stopped by {type(e).__name__}: {str(e)[:200]}")
            break
    r.check("OOM raised as the framework's own error", r.d["oom_ok"])
    return held


# ---- PyTorch -------------------------------------------------------------------------------

@guarded
def torch_fill(r):
    import torch
    free, total = torch.cuda.mem_get_info()
    props = torch.cuda.get_device_properties(0).total_memory
    r.note(f"mem_get_info total {total // MiB} MiB, props.total_memory {props // MiB} MiB")
    r.check("mem_get_info total == quota", total == QUOTA)
    r.check("props.total_memory == quota", props == QUOTA)
    a = torch.randn(512, 512, device="cuda")
    (a @ a).sum().item()  # cuBLAS handle and workspace, as any real program has them
    held = fill(lambda: torch.empty(STEP // 4, dtype=torch.float32, device="cuda"),
                lambda e: isinstance(e, torch.OutOfMemoryError), r)
    reserved = torch.cuda.memory_reserved()
    r["framework_peak_mib"] = reserved // MiB
    r["smi_peak_mib"] = smi_used_mib()
    r.check("nvidia-smi peak <= quota", 0 <= r.d["smi_peak_mib"] <= QUOTA_MIB)
    r.check("reached quota - 1.5 GiB", reserved >= USABLE)
    free_peak, total_peak = torch.cuda.mem_get_info()  # must not throw over the quota
    r.note(f"at peak: mem_get_info free {free_peak // MiB} MiB")
    small = []
    try:
        for _ in range(100):
            small.append(torch.empty(256, dtype=torch.float32, device="cuda"))
    except torch.OutOfMemoryError:
        pass
    r.note(f"1 KiB tensors at peak: {len(small)}/100")
    del small
    n = len(held)
    del held[n // 2:]
    torch.cuda.empty_cache()  # give it back to the driver, so the next step goes through it again
    again = [torch.ones(STEP // 4, device="cuda") for _ in range(n - n // 2 - 1)]
    small = [torch.full((256,), 2.0, device="cuda") for _ in range(1000)]
    x = torch.randn(1024, 1024, device="cuda", dtype=torch.float64)
    ok = torch.allclose((x @ x).cpu(), x.cpu() @ x.cpu()) and float(again[-1].sum()) == STEP // 4 \
        and float(torch.stack(small).sum()) == 2.0 * 256 * 1000
    r["after_free_ok"] = ok
    r.check("allocate again + matmul + 1000 x 1 KiB after free", ok)


@guarded
def torch_graph(r):
    import torch
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    static = torch.randn(1024, 1024, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            torch.relu(static @ static) + 1
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        z = torch.relu(static @ static) + 1                 # allocated inside the capture
        w = torch.ones(STEP // 4, device="cuda") * 3.0      # 64 MiB allocated inside the capture
    ok = True
    for _ in range(5):
        static.copy_(torch.randn(1024, 1024, device="cuda"))
        g.replay()
        torch.cuda.synchronize()
        ok = ok and torch.allclose(z, torch.relu(static @ static) + 1, rtol=1e-4, atol=1e-3)
    ok = ok and float(w.sum()) == 3.0 * (STEP // 4)
    r.check("captured graph replays correctly", ok)
    # The graph's memory stays alive: fill the rest of the quota around it.
    held = fill(lambda: torch.empty(STEP // 4, dtype=torch.float32, device="cuda"),
                lambda e: isinstance(e, torch.OutOfMemoryError), r)
    r["framework_peak_mib"] = torch.cuda.memory_reserved() // MiB
    r["smi_peak_mib"] = smi_used_mib()
    r.check("nvidia-smi peak <= quota", 0 <= r.d["smi_peak_mib"] <= QUOTA_MIB)
    del held
    torch.cuda.empty_cache()
    g.replay()
    torch.cuda.synchronize()
    ok2 = torch.allclose(z, torch.relu(static @ static) + 1, rtol=1e-4, atol=1e-3)
    r["after_free_ok"] = ok2
    r.check("replay after the fill", ok2)
    r.note(f"PYTORCH_CUDA_ALLOC_CONF={conf or '(default)'}")


@guarded
def torch_noquota(r):
    """Under the hook with no CUSLICE_MEMORY_LIMIT: report what a native run reports."""
    import torch
    free, total = torch.cuda.mem_get_info()
    props = torch.cuda.get_device_properties(0).total_memory
    r["framework_peak_mib"] = total // MiB
    r.note(f"mem_get_info total {total} props {props}")
    big = torch.ones((QUOTA + 2048 * MiB) // 4, device="cuda")  # more than a quota would allow
    x = torch.randn(1024, 1024, device="cuda")
    ok = float(big[-1]) == 1.0 and torch.isfinite(x @ x).all().item()
    r["smi_peak_mib"] = smi_used_mib()
    r["after_free_ok"] = ok
    r.check("quota + 2 GiB tensor and a matmul work", ok)
    r["totals"] = [total, props]
    print(f"TOTALS {total} {props}", flush=True)


# ---- JAX -----------------------------------------------------------------------------------

@guarded
def jax_fill(r):
    import jax
    import jax.numpy as jnp
    prealloc = os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "true").lower() not in ("false", "0")
    dev = jax.devices()[0]
    x = jnp.ones((1024, 1024), jnp.float32)
    ok = float((x @ x)[0, 0]) == 1024.0
    r.check("starts and computes", ok)
    stats = dev.memory_stats() or {}
    limit = stats.get("bytes_limit", 0)
    r.note(f"bytes_limit {limit // MiB} MiB, preallocate={prealloc}")
    if prealloc:
        r.check("preallocation sized from the quota (bytes_limit <= 0.8 x quota)",
                0 < limit <= 0.8 * QUOTA)
    def alloc():
        a = jnp.ones((STEP // 4,), jnp.float32)
        a.block_until_ready()
        return a
    held = fill(alloc, lambda e: "RESOURCE_EXHAUSTED" in str(e), r)
    stats = dev.memory_stats() or {}
    r["framework_peak_mib"] = stats.get("peak_bytes_in_use", len(held) * STEP) // MiB
    r["smi_peak_mib"] = smi_used_mib()
    r.check("nvidia-smi peak <= quota", 0 <= r.d["smi_peak_mib"] <= QUOTA_MIB)
    r.check("reached 0.6 x quota", len(held) * STEP >= 0.6 * QUOTA)
    n = len(held)
    del held[n // 2:]
    again = [alloc() for _ in range(n - n // 2 - 1)]
    y = jnp.ones((1024, 1024), jnp.float32)
    ok = float((y @ y)[0, 0]) == 1024.0 and float(again[-1][0]) == 1.0
    r["after_free_ok"] = ok
    r.check("allocate again + matmul after free", ok)


# ---- CuPy ----------------------------------------------------------------------------------

@guarded
def cupy_fill(r):
    import cupy
    use_async = os.environ.get("SUITE_CUPY_ASYNC") == "1"
    if use_async:
        cupy.cuda.set_allocator(cupy.cuda.MemoryAsyncPool().malloc)
    free, total = cupy.cuda.runtime.memGetInfo()
    r.check("memGetInfo total == quota", total == QUOTA)
    a = cupy.ones((512, 512), cupy.float32)
    float((a @ a).sum())
    held = fill(lambda: cupy.empty(STEP // 4, cupy.float32),
                lambda e: isinstance(e, cupy.cuda.memory.OutOfMemoryError), r)
    pool = cupy.get_default_memory_pool()
    peak = len(held) * STEP if use_async else pool.total_bytes()
    r["framework_peak_mib"] = peak // MiB
    r["smi_peak_mib"] = smi_used_mib()
    r.check("nvidia-smi peak <= quota", 0 <= r.d["smi_peak_mib"] <= QUOTA_MIB)
    r.check("reached quota - 1.5 GiB", peak >= USABLE)
    n = len(held)
    del held[n // 2:]
    again = [cupy.ones(STEP // 4, cupy.float32) for _ in range(n - n // 2 - 1)]  # from the cache
    del again
    pool.free_all_blocks()
    again = [cupy.ones(STEP // 4, cupy.float32) for _ in range(n - n // 2 - 1)]  # from the driver
    x = cupy.random.rand(512, 512)
    ok = bool(cupy.allclose(x @ x, cupy.asarray(cupy.asnumpy(x) @ cupy.asnumpy(x)))) \
        and float(again[-1][-1]) == 1.0
    r["after_free_ok"] = ok
    r.check("allocate again (cache, then driver) + matmul after free", ok)
    r.note("allocator=" + ("MemoryAsyncPool" if use_async else "default MemoryPool"))


WORKERS = {"torch-fill": torch_fill, "torch-graph": torch_graph, "torch-noquota": torch_noquota,
           "jax-fill": jax_fill, "cupy-fill": cupy_fill}

if __name__ == "__main__":
    name = sys.argv[1]
    WORKERS[name](Result(sys.argv[2] if len(sys.argv) > 2 else name))
