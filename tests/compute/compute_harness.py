"""What the compute scenarios stand on: a private cuslice-scheduler, a private simulated device,
and tenant_worker processes run the way a user runs an application under cuslice.

Every path comes from the environment CMake sets (tests/compute/CMakeLists.txt):
CUSLICE_HOOK, CUSLICE_SCHEDULER, TENANT_WORKER, FAKE_DRIVER_DIR, CUSLICE_NM.

Times are CLOCK_MONOTONIC nanoseconds, the clock of the fake driver's timeline and of the
worker's --start-at/--end-at, so that all workers of a scenario measure the same window.
"""
import contextlib
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kit"))
from cuslice_kit import Scheduler  # noqa: E402

HOOK = os.environ.get("CUSLICE_HOOK", "")
SCHEDULER = os.environ.get("CUSLICE_SCHEDULER", "")
WORKER = os.environ.get("TENANT_WORKER", "")
FAKE_DRIVER_DIR = os.environ.get("FAKE_DRIVER_DIR", "")
NM = os.environ.get("CUSLICE_NM", "nm")

MS = 1_000_000
_serial = itertools.count(1)


def now_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def hook_gates_launches():
    """Whether libcuslice.so defines cuLaunchKernel, i.e. launch gating exists in this build."""
    listing = subprocess.run([NM, "-D", "--defined-only", HOOK], capture_output=True, text=True,
                             check=True).stdout
    return any(line.split()[-1] == "cuLaunchKernel" for line in listing.splitlines() if line)


def unique_name(kind):
    return f"cuslice-compute-{kind}-{os.getpid()}-{next(_serial)}"


class Daemon(Scheduler):
    """cuslice-scheduler (tests/kit/cuslice_kit.py) in workdir, with the given YAML configuration,
    its socket in a folder of its own (so that the control socket's folder beside it is in
    workdir too). Not started until start().

    It logs at debug level, where it writes "gpu N: token -> NAME" at every change of holder:
    the scenarios read that to know the hooks really asked for the token (a hook that gates
    nothing must not pass a scenario because the device happened to be shared well).
    """

    def __init__(self, workdir, config_yaml):
        super().__init__(workdir, config=config_yaml, inherit_env=True, log_level="debug", binary=SCHEDULER,
                         shm_name="/" + unique_name("segment"),
                         socket_path=os.path.join(workdir, "run", "cuslice.sock"), log_dir=workdir, start=False)

    def start(self, timeout_s=5.0):
        super().start()
        self.wait_ready(timeout_s)

    def stop(self):
        super().stop(timeout=5)

    def token_holders(self, gpu=0):
        """Every holder GPU gpu's token went to, in order ("(none)" when it was taken back)."""
        marker = f"gpu {gpu}: token -> "
        return [line.split(marker, 1)[1].strip() for line in self.log_text().splitlines()
                if marker in line]


class Lateness(threading.Thread):
    """How late this machine wakes a thread that sleeps 1 ms, sampled over a scenario's window
    beside its workers: the measure of the box that the timing bounds allow for. A bound that
    depends on when a process gets a CPU adds what this thread saw in the same window; on an
    idle box that is tens of microseconds, beside a parallel build milliseconds."""

    def __init__(self, start_ns, end_ns):
        super().__init__(daemon=True)
        self.start_ns, self.end_ns = start_ns, end_ns
        self.late_us = []

    def run(self):
        while (t := now_ns()) < self.end_ns:
            time.sleep(0.001)
            late = (now_ns() - t) / 1000.0 - 1000.0
            if t >= self.start_ns:
                self.late_us.append(max(0.0, late))

    def summary(self):
        """p50, p99 and max lateness in microseconds (0 when nothing was sampled)."""
        v = sorted(self.late_us) or [0.0]
        return {"p50_us": v[len(v) // 2], "p99_us": v[min(len(v) - 1, int(len(v) * 0.99))], "max_us": v[-1]}


class Scenario:
    """One scenario's world: a work folder, a simulated device, and (optionally) a daemon."""

    def __init__(self, config_yaml=None):
        self._tmp = tempfile.TemporaryDirectory(prefix="cuslice-compute-")
        self.workdir = self._tmp.name
        self.device = unique_name("device")
        self.daemon = Daemon(self.workdir, config_yaml) if config_yaml is not None else None
        # Without a daemon, workers look for one here and find nobody.
        self.socket = str(self.daemon.socket) if self.daemon else os.path.join(self.workdir, "none.sock")
        self.lateness = None  # of the last run (Lateness.summary)

    def __enter__(self):
        if self.daemon:
            self.daemon.start()
        return self

    def __exit__(self, *exc):
        if self.daemon:
            self.daemon.stop()
        with contextlib.suppress(FileNotFoundError):
            os.unlink("/dev/shm/" + self.device)
        self._tmp.cleanup()

    def worker_env(self, tenant, extra=None, fake_kernel=False):
        env = dict(os.environ)
        # The fake kernel driver's ioctls come after the hook, which must see them first.
        rm = os.path.join(FAKE_DRIVER_DIR, "libfake_nvidia_rm.so") if fake_kernel else ""
        env.update({
            # A sanitizer's runtime, when the tree is built with one, must come first.
            "LD_PRELOAD": ":".join(p for p in (os.environ.get("CUSLICE_TEST_PRELOAD", ""), HOOK, rm) if p),
            "LD_LIBRARY_PATH": FAKE_DRIVER_DIR,
            "FAKE_CUDA_SHARED_DEVICE": self.device,
            "CUSLICE_SOCKET": self.socket,
            "CUSLICE_TENANT": tenant,
            "CUSLICE_LOG_LEVEL": "warn",
        })
        env.update(extra or {})
        return env

    def run(self, workers, duration_s, start_delay_s=1.0, during=None):
        """Runs the workers over one common window and returns their reports, in order.

        workers: dicts with tenant, mode (spin | request), kernel_us, and sync_every or
        period_ms; optional short_us and shorts (spin: mixed kernel lengths), resets (spin: primary context
        resets through the window), pause_us (spin: a sleep after each batch), copy_back (spin: a copy to pageable memory ends each batch),
        channel_groups (two GPU channel groups, answered by the fake kernel driver: time slices the hook can shorten), env. during(processes, start_ns, end_ns) runs while they work.
        The start delay covers process start and registration with the daemon.
        """
        start = now_ns() + int(start_delay_s * 1e9)
        end = start + int(duration_s * 1e9)
        sampler = Lateness(start, end)
        sampler.start()
        processes = []
        for w in workers:
            argv = [WORKER, "--mode", w["mode"], "--kernel-us", str(w["kernel_us"]),
                    "--start-at", str(start), "--end-at", str(end)]
            if "sync_every" in w:
                argv += ["--sync-every", str(w["sync_every"])]
            if "period_ms" in w:
                argv += ["--period-ms", str(w["period_ms"])]
            if "shorts" in w:
                argv += ["--short-us", str(w["short_us"]), "--shorts", str(w["shorts"])]
            if "pause_us" in w:
                argv += ["--pause-us", str(w["pause_us"])]
            if "resets" in w:
                argv += ["--resets", str(w["resets"])]
            if w.get("copy_back"):
                argv += ["--copy-back", "1"]
            if w.get("channel_groups"):
                argv += ["--channel-groups", "1"]
            env = self.worker_env(w["tenant"], w.get("env"), fake_kernel=w.get("channel_groups", False))
            processes.append(subprocess.Popen(argv, env=env,
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                              text=True))
        if during:
            during(processes, start, end)
        reports = []
        for w, p in zip(workers, processes):
            try:
                out, err = p.communicate(timeout=duration_s + start_delay_s + 30)
            except subprocess.TimeoutExpired:
                for q in processes:  # a hung worker must not outlive the test
                    q.kill()
                raise
            lines = out.strip().splitlines()
            report = json.loads(lines[-1]) if lines else {}
            report.update({"returncode": p.returncode, "stderr": err, "tenant": w["tenant"]})
            reports.append(report)
        sampler.join()
        # The box's lateness over this window, for bounds that depend on it.
        self.lateness = sampler.summary()
        return reports


def sleep_until_ns(deadline):
    delay = (deadline - now_ns()) / 1e9
    if delay > 0:
        time.sleep(delay)
