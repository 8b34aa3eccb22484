"""A tenant's memory as the driver counts it: N processes of one tenant (tenant_memory_worker.cpp,
under libcuslice.so and a private cuslice-scheduler) fill the tenant's quota at once, right
after creating their contexts; then each loads a kernel and launches it over what it holds
(its code takes memory no allocation call asks for); then each tries to fill again. After each
step the driver's per-process memory is read from NVML (what nvidia-smi --query-compute-apps
shows, in bytes) and set against the quota, per process and for the tenant, beside what the
hook charged (`cuslice status --json`).

Run by bench/tenant_memory.sh, which builds the worker and finds cuslice:

    python3 bench/tenant_memory.py --tree TREE --worker BINARY --kernel FATBIN [--processes 32]
                                   [--quota-gib 24] [--out DIR]

Passes (exit 0) when the first fill reaches at least 95% of the quota by the driver's count
and no step finds the tenant over its quota; exit 1 otherwise, 2 when it cannot run.
"""
import argparse
import ctypes
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time

MiB = 1 << 20
GiB = 1 << 30
STEP_TIMEOUT_S = 60


class Nvml:
    """The driver's per-process memory through libnvidia-ml (exact bytes); nvidia-smi's MiB
    when the library cannot be loaded."""

    class ProcessInfo(ctypes.Structure):
        _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                    ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]

    def __init__(self):
        self.lib = None
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() == 0:
                self.lib = lib
        except OSError:
            pass

    def describe(self):
        """The first GPU's name and the driver's version."""
        if self.lib is None:
            return "NVML not loaded"
        name, version = ctypes.create_string_buffer(96), ctypes.create_string_buffer(80)
        dev = ctypes.c_void_p()
        self.lib.nvmlSystemGetDriverVersion(version, 80)
        if self.lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) == 0:
            self.lib.nvmlDeviceGetName(dev, name, 96)
        return f"{name.value.decode()}, driver {version.value.decode()}"

    def used(self):
        """{pid: bytes} over every GPU."""
        if self.lib is None:
            return self._smi()
        count = ctypes.c_uint(0)
        self.lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
        held = {}
        for i in range(count.value):
            dev = ctypes.c_void_p()
            if self.lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(dev)) != 0:
                continue
            infos = (self.ProcessInfo * 1024)()
            n = ctypes.c_uint(1024)
            if self.lib.nvmlDeviceGetComputeRunningProcesses_v3(dev, ctypes.byref(n), infos) != 0:
                continue
            for k in range(n.value):
                if infos[k].usedGpuMemory != 2**64 - 1:
                    held[infos[k].pid] = held.get(infos[k].pid, 0) + infos[k].usedGpuMemory
        return held

    @staticmethod
    def _smi():
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, env=clean_env()).stdout
        held = {}
        for row in out.splitlines():
            parts = [p.strip() for p in row.split(",")]
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                held[int(parts[0])] = held.get(int(parts[0]), 0) + int(parts[1]) * MiB
        return held


def clean_env():
    env = dict(os.environ)
    for k in list(env):
        if k == "LD_PRELOAD" or k.startswith("CUSLICE_"):
            del env[k]
    return env


class Worker:
    def __init__(self, binary, kernel, env):
        self.proc = subprocess.Popen([binary, kernel], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
                                     bufsize=1)
        self.pid = self.proc.pid
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            if line.startswith("@ "):
                self.lines.put(line[2:].strip())
        self.lines.put(None)

    def send(self, command):
        try:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # it exited: its answer is missing, which the step reports

    def answer(self, deadline):
        try:
            return self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            return None

    def stop(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()
            self.proc.wait()


def gib(b):
    return f"{b / GiB:.2f} GiB"


def mib(b):
    return f"{b / MiB:.0f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", required=True, help="a cuslice installation (bin/, lib/)")
    ap.add_argument("--worker", required=True, help="the built tenant_memory_worker")
    ap.add_argument("--kernel", required=True, help="the fatbin of tenant_memory_touch.cu")
    ap.add_argument("--processes", type=int, default=32)
    ap.add_argument("--quota-gib", type=float, default=24.0)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    quota = int(args.quota_gib * GiB)
    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, "tenant_memory.log"), "w")

    def say(text=""):
        print(text)
        log.write(text + "\n")
        log.flush()

    nvml = Nvml()
    work = tempfile.mkdtemp(prefix="cuslice-tenant-memory.")
    sock = os.path.join(work, "cuslice.sock")
    shm = f"/cuslice-tenant-memory-{os.getpid()}"
    config = os.path.join(work, "cuslice.yaml")
    with open(config, "w") as f:
        f.write(f"tenants:\n  - name: t\n    memory: {quota // MiB}MiB\n")
    sched_log = open(os.path.join(args.out, "tenant_memory_scheduler.log"), "w")
    daemon = subprocess.Popen([f"{args.tree}/bin/cuslice-scheduler", "--config", config, "--socket", sock,
                               "--shm-name", shm], stdout=sched_log, stderr=subprocess.STDOUT, env=clean_env())
    workers = []
    failures = []
    try:
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        if not os.path.exists(sock):
            say("the scheduler did not start (tenant_memory_scheduler.log)")
            return 2
        others = set(nvml.used())
        env = clean_env()
        env.update(LD_PRELOAD=f"{args.tree}/lib/libcuslice.so", CUSLICE_SOCKET=sock, CUSLICE_TENANT="t")
        version = subprocess.run([f"{args.tree}/bin/cuslice", "version"], capture_output=True, text=True,
                                 env=clean_env()).stdout.splitlines()[:1]
        say(f"# {args.processes} processes of one tenant, quota {gib(quota)}; {nvml.describe()}; "
            f"{version[0] if version else 'cuslice ?'}")
        if others:
            say(f"# other GPU processes before the run (not counted): {sorted(others)}")

        def step(name, command, expect):
            deadline = time.monotonic() + STEP_TIMEOUT_S
            if command:
                for w in workers:
                    w.send(command)
            answers = {}
            for w in workers:
                a = w.answer(deadline)
                answers[w.pid] = a
                if a is None or not a.startswith(expect):
                    failures.append(f"{name}: worker {w.pid} answered {a!r}")
            return answers

        def status():
            out = subprocess.run([f"{args.tree}/bin/cuslice", "status", "--json", "--socket", sock, "--shm-name",
                                  shm], capture_output=True, text=True, env=clean_env(), timeout=30).stdout
            try:
                for g in json.loads(out)["gpus"]:
                    for t in g["tenants"]:
                        if t["name"] == "t":
                            return t["memory_used_bytes"], t["over_quota_bytes"]
            except (ValueError, KeyError, TypeError):
                pass
            return None, None

        rows = []

        def measure(name):
            held = nvml.used()
            mine = {w.pid: held.get(w.pid, 0) for w in workers}
            total = sum(mine.values())
            if total == 0 and held:
                # NVML names the processes by pids this harness does not see (another pid
                # namespace): count every GPU process that was not there before.
                total = sum(b for p, b in held.items() if p not in others)
            charged, watchdog = status()
            over = max(0, total - quota)
            rows.append((name, total, over, charged, watchdog))
            if over:
                failures.append(f"{name}: the tenant holds {mib(over)} MiB over its quota by the driver's count")
            return mine, total

        for _ in range(args.processes):
            workers.append(Worker(args.worker, args.kernel, env))
        step("start", None, "ready")
        contexts, _ = measure("contexts made")
        filled = step("fill", "fill", "filled ")
        after_fill, total_fill = measure("filled at once")
        if total_fill < 0.95 * quota:
            failures.append(f"the fill reached {100.0 * total_fill / quota:.1f}% of the quota, below 95%")
        step("touch", "touch", "touched")
        after_touch, _ = measure("first kernels")
        step("refill", "fill", "filled ")
        after_refill, _ = measure("filled again")

        say()
        say(f"{'tenant':<16}{'driver-counted':>16}{'of quota':>10}{'over':>10}{'hook-charged':>16}{'watchdog over':>15}")
        for name, total, over, charged, watchdog in rows:
            say(f"{name:<16}{gib(total):>16}{100.0 * total / quota:>9.1f}%{mib(over) + ' MiB':>10}"
                f"{gib(charged) if charged is not None else '?':>16}"
                f"{(mib(watchdog) + ' MiB') if watchdog is not None else '?':>15}")
        say()
        say("per process (MiB): context = after its context was made; allocated = what its fill got;")
        say("beyond = driver-counted - context - allocated (taken without an allocation call)")
        say(f"{'pid':>8}{'context':>9}{'allocated':>11}{'filled':>8}{'beyond':>8}{'touched':>9}{'beyond':>8}"
            f"{'refilled':>10}")
        for w in workers:
            a = filled.get(w.pid) or ""
            allocated = int(a.split()[1]) if a.startswith("filled ") else 0
            ctx = contexts[w.pid]
            say(f"{w.pid:>8}{mib(ctx):>9}{mib(allocated):>11}{mib(after_fill[w.pid]):>8}"
                f"{mib(after_fill[w.pid] - ctx - allocated):>8}{mib(after_touch[w.pid]):>9}"
                f"{mib(after_touch[w.pid] - ctx - allocated):>8}{mib(after_refill[w.pid]):>10}")
        say()
        for f in failures:
            say(f"FAIL: {f}")
        say("PASS" if not failures else "FAIL")
        return 0 if not failures else 1
    finally:
        for w in workers:
            w.stop()
        daemon.terminate()
        try:
            daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            daemon.kill()
        for f in (config,):
            if os.path.exists(f):
                os.unlink(f)
        try:
            os.rmdir(work)
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main())
