"""What the preemption scenarios stand on: a private cuslice-scheduler and a private simulated
device of the fake driver (whose checkpoint API the scheduler calls), memory_worker processes
run under libcuslice.so the way users run applications, and a view of the fake driver's own
state (the checkpoint state and memory of any process) from this test process.

Paths come from the environment CMake sets (tests/preemption/CMakeLists.txt): CUSLICE_HOOK,
CUSLICE_SCHEDULER, CUSLICE_CLI, MEMORY_WORKER, FAKE_DRIVER_DIR, and CUSLICE_TEST_PRELOAD (a
sanitizer's runtime, or empty).
"""
import contextlib
import ctypes
import itertools
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kit"))
from cuslice_kit import Scheduler  # noqa: E402

HOOK = os.environ.get("CUSLICE_HOOK", "")
SCHEDULER = os.environ.get("CUSLICE_SCHEDULER", "")
CLI = os.environ.get("CUSLICE_CLI", "")
WORKER = os.environ.get("MEMORY_WORKER", "")
SOCKET_ATTACKER = os.environ.get("SOCKET_ATTACKER", "")  # tests/scheduler/clients/socket_attacker.cpp
FAKE_DRIVER_DIR = os.environ.get("FAKE_DRIVER_DIR", "")

GiB = 1 << 30
MiB = 1 << 20
_serial = itertools.count(1)

# CUprocessState
RUNNING, LOCKED, CHECKPOINTED, FAILED = 0, 1, 2, 3


def unique_name(kind):
    return f"cuslice-preempt-{kind}-{os.getpid()}-{next(_serial)}"


def wait_for(condition, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


class FakeDevice:
    """The simulated device as the fake driver keeps it, read from this process: the fake is
    loaded here too (sharing the device's object), and its checkpoint API and control functions
    answer for any process."""

    _lib = None

    def __init__(self, name):
        if FakeDevice._lib is None:
            os.environ["FAKE_CUDA_SHARED_DEVICE"] = name
            FakeDevice._lib = ctypes.CDLL(os.path.join(FAKE_DRIVER_DIR, "libcuda.so.1"))
            lib = FakeDevice._lib
            for f in ("fake_cuda_process_used", "fake_cuda_process_checkpointed", "fake_cuda_device_used_all"):
                getattr(lib, f).restype = ctypes.c_size_t
        os.environ["FAKE_CUDA_SHARED_DEVICE"] = name
        self.lib = FakeDevice._lib
        self.lib.fake_cuda_reset()
        assert self.lib.cuInit(0) == 0

    def state(self, pid):
        state = ctypes.c_int(-1)
        rc = self.lib.cuCheckpointProcessGetState(pid, ctypes.byref(state))
        return state.value if rc == 0 else None

    def used(self, pid):
        return self.lib.fake_cuda_process_used(pid, 0)

    def checkpointed(self, pid):
        return self.lib.fake_cuda_process_checkpointed(pid, 0)

    def used_all(self):
        return self.lib.fake_cuda_device_used_all(0)


class Daemon(Scheduler):
    """cuslice-scheduler (tests/kit/cuslice_kit.py) in workdir on the simulated `device`, with
    the given YAML configuration, its socket in a folder of its own (so that the control
    socket's folder beside it is in workdir too). Not started until start(); a restart appends
    to the same log."""

    def __init__(self, workdir, config_yaml, device, env=None, args=()):
        self.device = device
        super().__init__(workdir, args=args, config=config_yaml, inherit_env=True, log_level="debug",
                         env={"LD_LIBRARY_PATH": FAKE_DRIVER_DIR, "FAKE_CUDA_SHARED_DEVICE": device, **(env or {})},
                         binary=SCHEDULER, shm_name="/" + unique_name("segment"),
                         socket_path=os.path.join(workdir, "run", "cuslice.sock"), log_dir=workdir, start=False)

    def start(self, timeout_s=10.0):
        super().start()
        self.wait_ready(timeout_s)

    def stop(self, sig=signal.SIGTERM):
        super().stop(sig, timeout=10)

    def log_text(self):
        """Everything it logged, across restarts."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Worker:
    """A memory_worker process in a tenant: commands in, one answer line each out. Unhooked, it
    runs without libcuslice.so and may register itself (`attach`): a process that does what it
    likes rather than what the hook would."""

    def __init__(self, scenario, tenant, env=None, hooked=True):
        self.log = os.path.join(scenario.workdir, f"{tenant}-{next(_serial)}.log")
        full = dict(os.environ)
        full.update({
            # A sanitizer's runtime, when the tree is built with one, must come first.
            "LD_PRELOAD": ":".join(p for p in (os.environ.get("CUSLICE_TEST_PRELOAD", ""), HOOK if hooked else "") if p),
            "LD_LIBRARY_PATH": FAKE_DRIVER_DIR,
            "FAKE_CUDA_SHARED_DEVICE": scenario.device,
            "CUSLICE_SOCKET": str(scenario.daemon.socket),
            "CUSLICE_TENANT": tenant,
            "CUSLICE_LOG_LEVEL": "info",
        })
        full.update(env or {})
        with open(self.log, "w") as log:
            self.process = subprocess.Popen([WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=log, env=full, text=True, bufsize=1)
        self.pid = self.process.pid

    def send(self, command):
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def answer(self, timeout_s=20.0):
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        if not ready:
            raise AssertionError(f"pid {self.pid}: no answer within {timeout_s} s; its log:\n{self.log_text()}")
        line = self.process.stdout.readline().strip()
        if not line:
            raise AssertionError(f"pid {self.pid} exited ({self.process.poll()}); its log:\n{self.log_text()}")
        return line.split()

    def answered_within(self, timeout_s):
        """Whether an answer is ready within timeout_s (a negative check: a slow machine can only
        make it pass)."""
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        return bool(ready)

    def do(self, command, timeout_s=20.0):
        self.send(command)
        return self.answer(timeout_s)

    def ok(self, command, timeout_s=20.0):
        words = self.do(command, timeout_s)
        assert words[0] == "ok", f"pid {self.pid}: `{command}` answered {words}; its log:\n{self.log_text()}"
        return words

    def exit(self):
        if self.process.poll() is None:
            with contextlib.suppress(BrokenPipeError):
                self.send("exit")
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self):
        self.process.kill()
        self.process.wait()

    def exited(self):
        """Its exit status (negative: killed by that signal) once it has exited, else None."""
        return self.process.poll()

    def log_text(self):
        with open(self.log) as f:
            return f.read()


class Scenario:
    def __init__(self, config_yaml, daemon_env=None, daemon_args=()):
        self._tmp = tempfile.TemporaryDirectory(prefix="cuslice-preempt-")
        self.workdir = self._tmp.name
        self.device = unique_name("device")
        self.daemon = Daemon(self.workdir, config_yaml, self.device, daemon_env, daemon_args)
        self.workers = []
        self.fake = None

    def __enter__(self):
        self.fake = FakeDevice(self.device)
        self.daemon.start()
        return self

    def __exit__(self, *exc):
        for w in self.workers:
            with contextlib.suppress(Exception):
                w.kill()
        self.daemon.stop()
        with contextlib.suppress(FileNotFoundError):
            os.unlink("/dev/shm/" + self.device)
        self._tmp.cleanup()

    def worker(self, tenant, env=None):
        w = self.process(tenant, env)
        w.ok("init")
        return w

    def process(self, tenant, env=None, hooked=True):
        """A worker that has made no CUDA call yet."""
        w = Worker(self, tenant, env, hooked)
        self.workers.append(w)
        return w

    def status(self):
        out = subprocess.run([CLI, "status", "--json", "--socket", self.daemon.socket], capture_output=True,
                             text=True, check=True).stdout
        return json.loads(out)

    def tenant_status(self, name):
        return next(t for t in self.status()["tenants"] if t["name"] == name)
