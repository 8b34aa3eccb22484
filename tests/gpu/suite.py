"""The GPU proof suite: every scenario under the hook, one table.

    python3 suite.py --hook build-gpu/hook/libcuslice.so --bin build-gpu/gpu-tests [--out DIR]
                     [--only NAME ...]

tests/gpu/run.sh builds the hook and the CUDA programs, then runs this. Each scenario is a
separate process (a worker of workers.py, a mode of cuda_quota, or a command checked here)
that reports one `RESULT {json}` line; a scenario without one (crash, hang, import error)
fails. Prints the table last, writes gpu_suite.log and gpu_suite.md to --out, exits 1 on any
FAIL. tests/gpu/test_gpu.py runs the same scenarios one by one under pytest.
"""
import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
QUOTA_MIB = 4096
QUOTA = f"{QUOTA_MIB // 1024}GiB"


@dataclasses.dataclass
class Scenario:
    name: str
    kind: str                 # "worker" | "cuda" | "special"
    arg: str                  # worker name, cuda_quota mode, or special check
    env: dict = dataclasses.field(default_factory=dict)
    timeout: int = 100


SCENARIOS = [
    Scenario("torch default allocator", "worker", "torch-fill"),
    Scenario("torch expandable_segments", "worker", "torch-fill",
             {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
    Scenario("torch cudaMallocAsync", "worker", "torch-fill",
             {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}),
    Scenario("torch CUDA graph", "worker", "torch-graph"),
    Scenario("torch CUDA graph, cudaMallocAsync", "worker", "torch-graph",
             {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}),
    Scenario("jax preallocate (default)", "worker", "jax-fill"),
    Scenario("jax no preallocation, fraction .95", "worker", "jax-fill",
             {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_PYTHON_CLIENT_MEM_FRACTION": ".95"}),
    Scenario("cupy default pool", "worker", "cupy-fill"),
    Scenario("cupy MemoryAsyncPool", "worker", "cupy-fill", {"SUITE_CUPY_ASYNC": "1"}),
    Scenario("cuda-static cudaMalloc", "cuda", "malloc"),
    Scenario("cuda-static cudaMallocAsync", "cuda", "async"),
    Scenario("cuda-static cudaMallocManaged", "cuda", "managed"),
    Scenario("cuda-static cudaMallocPitch", "cuda", "pitch"),
    Scenario("cuda-static cudaMalloc3DArray", "cuda", "array3d"),
    Scenario("cuda-static VMM cuMemCreate/Map", "cuda", "vmm"),
    Scenario("cuda-static graph mem alloc node", "cuda", "graph"),
    Scenario("cuda-ptds 8 threads", "cuda", "threads"),
    Scenario("nvidia-smi memory.total", "special", "nvidia-smi", timeout=60),
    Scenario("no quota: hook invisible", "special", "no-quota"),
    Scenario("bad quota '4 furlongs'", "special", "bad-quota", timeout=60),
]


def base_env(hook, limit=QUOTA):
    env = dict(os.environ)
    for k in ("CUSLICE_MEMORY_LIMIT", "CUSLICE_LOG_LEVEL", "PYTORCH_CUDA_ALLOC_CONF",
              "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "LD_PRELOAD"):
        env.pop(k, None)
    env["SUITE_QUOTA_MIB"] = str(QUOTA_MIB)
    env["PYTHONUNBUFFERED"] = "1"
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    if hook:
        env["LD_PRELOAD"] = hook
    if limit is not None:
        env["CUSLICE_MEMORY_LIMIT"] = limit
    return env


def run(cmd, env, timeout):
    t0 = time.time()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr, time.time() - t0
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        return 124, out, err + f"\n[timed out after {timeout}s]", time.time() - t0


def parse_result(stdout):
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return None


def cuslice_lines(stderr):
    return [l for l in stderr.splitlines() if "cuslice" in l.lower()]


def fail_result(name, why):
    return {"scenario": name, "quota_mib": QUOTA_MIB, "framework_peak_mib": 0, "smi_peak_mib": -1,
            "oom": "-", "oom_ok": False, "after_free_ok": False, "checks": {why: False},
            "notes": "", "pass": False}


def smi_total_mib(env):
    rc, out, err, _ = run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                          env, 60)
    try:
        return int(out.split()[0]), rc, out, err
    except (ValueError, IndexError):
        return -1, rc, out, err


def run_special(s, hook, log):
    if s.arg == "nvidia-smi":
        hooked, rc1, out1, err1 = smi_total_mib(base_env(hook))
        plain, rc2, out2, err2 = smi_total_mib(base_env(None, None))
        log(f"$ LD_PRELOAD=hook CUSLICE_MEMORY_LIMIT={QUOTA} nvidia-smi --query-gpu=memory.total\n"
            f"{out1}{err1}\n$ nvidia-smi --query-gpu=memory.total\n{out2}{err2}")
        r = fail_result(s.name, "")
        r["checks"] = {"hooked shows the quota": hooked == QUOTA_MIB,
                       "plain shows the card (> quota)": plain > QUOTA_MIB,
                       "hook silent on stderr": not cuslice_lines(err1)}
        r.update(framework_peak_mib=hooked, smi_peak_mib=plain, oom="n/a", oom_ok=True,
                 after_free_ok=True, notes=f"hooked {hooked} MiB, plain {plain} MiB")
        r["pass"] = all(r["checks"].values())
        return r
    if s.arg == "no-quota":
        cmd = [sys.executable, os.path.join(HERE, "workers.py"), "torch-noquota", s.name]
        rc1, out1, err1, _ = run(cmd, base_env(hook, None), s.timeout)
        rc2, out2, err2, _ = run(cmd, base_env(None, None), s.timeout)
        log(f"--- hooked, no limit (rc {rc1})\n{out1}{err1}\n--- native (rc {rc2})\n{out2}{err2}")
        r1, r2 = parse_result(out1), parse_result(out2)
        if not r1 or not r2:
            return fail_result(s.name, "both runs report")
        r1["checks"]["totals equal the native run's"] = r1.get("totals") == r2.get("totals")
        r1["checks"]["hook silent on stderr"] = not cuslice_lines(err1)
        r1["quota_mib"] = "none"
        r1["oom"], r1["oom_ok"] = "n/a", True
        r1["notes"] += f"native totals {r2.get('totals')}, hooked totals {r1.get('totals')}"
        r1["pass"] = all(r1["checks"].values())
        return r1
    if s.arg == "bad-quota":
        env = base_env(hook, "4 furlongs")
        cmd = [sys.executable, "-c", "import torch; torch.zeros(1, device='cuda'); print('ALLOCATED')"]
        rc, out, err, _ = run(cmd, env, s.timeout)
        log(f"--- rc {rc}\n{out}{err}")
        lines = cuslice_lines(err)
        last = [l for l in err.splitlines() if l.strip()][-1:] or ["(no stderr)"]
        r = fail_result(s.name, "")
        r["quota_mib"] = "'4 furlongs'"
        r["checks"] = {"torch CUDA init fails": rc != 0 and "ALLOCATED" not in out,
                       "exactly one cuslice line on stderr": len(lines) == 1}
        r.update(oom="n/a", oom_ok=True, after_free_ok=True,
                 notes=f"cuslice said: {lines[:2]}; user sees: {last[0][:200]}")
        r["pass"] = all(r["checks"].values())
        return r
    raise ValueError(s.arg)


def run_scenario(s, hook, bin_dir, log):
    if s.kind == "special":
        return run_special(s, hook, log)
    env = base_env(hook)
    env.update(s.env)
    if s.kind == "worker":
        cmd = [sys.executable, os.path.join(HERE, "workers.py"), s.arg, s.name]
    else:
        exe = "cuda_quota_ptds" if s.arg == "threads" else "cuda_quota"
        cmd = [os.path.join(bin_dir, exe), s.arg]
    rc, out, err, secs = run(cmd, env, s.timeout)
    log(f"$ {' '.join(f'{k}={v}' for k, v in s.env.items())} {' '.join(cmd)}\n"
        f"rc {rc}, {secs:.1f}s\n{out}{err}")
    r = parse_result(out)
    if r is None:
        tail = " | ".join(err.strip().splitlines()[-3:])[:300]
        r = fail_result(s.name, f"process reported (rc {rc})")
        r["notes"] = tail
        return r
    r["scenario"] = s.name
    r["checks"]["hook silent on stderr"] = not cuslice_lines(err)
    if rc != 0:
        r["checks"][f"exit status 0 (got {rc})"] = False
    r["pass"] = all(r["checks"].values())
    return r


def yes(b):
    return "yes" if b else "NO"


def table(results):
    rows = ["| scenario | quota | peak seen by framework | peak per nvidia-smi | "
            "OOM raised as framework's own error | works after free | PASS/FAIL |",
            "|---|---|---|---|---|---|---|"]
    for r in results:
        q = r["quota_mib"]
        q = f"{q} MiB" if isinstance(q, int) else q
        fw = r["framework_peak_mib"]
        fw = f"{fw:.0f} MiB" if isinstance(fw, (int, float)) else fw
        rows.append(f"| {r['scenario']} | {q} | {fw} | {r['smi_peak_mib']} MiB | "
                    f"{yes(r['oom_ok'])} ({r['oom']}) | {yes(r['after_free_ok'])} | "
                    f"{'PASS' if r['pass'] else 'FAIL'} |")
    notes = []
    for r in results:
        bad = [k for k, v in r["checks"].items() if not v]
        if bad or r.get("notes"):
            notes.append(f"- **{r['scenario']}**: " + (f"failed: {'; '.join(bad)}. " if bad else "")
                         + r.get("notes", ""))
    return "\n".join(rows), "\n".join(notes)


def select(only):
    """Scenarios named in `only`: exact names, else those containing the text."""
    if not only:
        return list(SCENARIOS)
    names = set()
    for o in only:
        exact = [s.name for s in SCENARIOS if s.name == o]
        names.update(exact or [s.name for s in SCENARIOS if o in s.name])
    return [s for s in SCENARIOS if s.name in names]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hook", required=True)
    ap.add_argument("--bin", required=True, help="folder with cuda_quota and cuda_quota_ptds")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--only", nargs="*", help="scenario names (substring match)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    logf = open(os.path.join(a.out, "gpu_suite.log"), "a")

    def log(text):
        logf.write(text + "\n")
        logf.flush()

    chosen = select(a.only)
    results = []
    for s in chosen:
        t0 = time.time()
        log(f"\n======== {s.name}")
        r = run_scenario(s, a.hook, a.bin, log)
        results.append(r)
        log("RESULT " + json.dumps(r))
        print(f"[{'PASS' if r['pass'] else 'FAIL'}] {s.name} ({time.time() - t0:.0f}s)", flush=True)
    tab, notes = table(results)
    md = f"# GPU suite under CUSLICE_MEMORY_LIMIT={QUOTA}\n\n{tab}\n\n{notes}\n"
    with open(os.path.join(a.out, "gpu_suite.md"), "w") as f:
        f.write(md)
    print("\n" + tab + "\n\n" + notes)
    failed = [r["scenario"] for r in results if not r["pass"]]
    print(f"\n{len(results) - len(failed)}/{len(results)} passed" + (f"; FAILED: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
