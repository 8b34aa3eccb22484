"""The Python tests' one way to run a cuslice-scheduler of their own, and the small waits and
names every suite shares. Owns the daemon's life (its runtime folder's socket, configuration
and log, a private segment name, start, readiness, stop, cleanup of what a killed daemon
leaves); never speaks the protocol nor reads the segment (the suites' own harnesses do).

Every test gets its own socket and segment name, so tests never meet a node's scheduler or
each other, and may run side by side. Waits are bounded polls (no sleeps that assume a
speed): they return as soon as the condition holds and fail with a message after a generous
deadline.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import weakref
from pathlib import Path

DEADLINE = 15.0  # seconds; only reached when something is broken


def built(name):
    """The path CMake put in the environment variable `name` (the binaries under test)."""
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"{name} is not set: run these tests through ctest, which sets it")
    return Path(value)


def eventually(condition, what, timeout=DEADLINE):
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def answers(socket_path):
    """Whether a connection to the scheduler's socket is accepted."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(str(socket_path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unique_shm_name():
    return f"/cuslice-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def shm_exists(name):
    return Path("/dev/shm" + name).exists()


def default_control_socket(socket_path):
    """Where the scheduler, `cuslice` and the device plugin look for the control socket of
    `socket_path` unless told (protocol/control_socket.h): its name, in the directory
    `<its directory>-control` beside its own."""
    socket_path = Path(socket_path)
    return socket_path.parent.parent / f"{socket_path.parent.name}-control" / socket_path.name


class Scheduler:
    """cuslice-scheduler in the runtime folder `runtime_dir`: its socket (`socket`, or s.sock
    there), its configuration (cuslice.yaml there, written from `config` and passed with --config
    when given), a private segment (or `shm_name`). Its stderr (scheduler.log) and stdout
    (scheduler.out) go to `log_dir`, by default a folder of its own that goes with the object:
    never into the runtime folder, whose every file a test may hold or check. The control socket is the default one for the socket (beside its
    folder) unless `args` say otherwise. `env` is its whole environment besides PATH, or what
    is added to this process's with `inherit_env`; `prefix` runs it through another command
    (prlimit). Started at construction unless `start` is false; as a context manager it is
    started and ready inside, stopped after, and its log printed when the block failed."""

    def __init__(self, runtime_dir, args=(), config=None, env=None, prefix=(), *, inherit_env=False,
                 shm_name=None, socket_path=None, log_dir=None, log_level="info", binary=None, start=True):
        self.dir = Path(runtime_dir)
        self.socket = Path(socket_path) if socket_path else self.dir / "s.sock"
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        self.control_socket = default_control_socket(self.socket)
        if "--control-socket" in args:
            self.control_socket = Path(args[list(args).index("--control-socket") + 1])
        self.shm_name = shm_name or unique_shm_name()
        self.config = self.dir / "cuslice.yaml"
        self.with_config = config is not None
        if self.with_config:
            self.config.write_text(config)
        if log_dir is None:
            log_dir = tempfile.mkdtemp(prefix="cuslice-scheduler-log-")
            weakref.finalize(self, shutil.rmtree, log_dir, True)
        self.log = Path(log_dir) / "scheduler.log"
        self.out = Path(log_dir) / "scheduler.out"
        self.args, self.env, self.prefix = tuple(args), dict(env or {}), tuple(prefix)
        self.inherit_env, self.log_level = inherit_env, log_level
        self.binary = str(binary or built("CUSLICE_SCHEDULER_BIN"))
        self.process = None
        self.stderr = ""
        self._log_from = 0  # where this run's stderr begins in the log (a restart appends)
        if start:
            self.start()

    def command(self):
        config = ("--config", str(self.config)) if self.with_config else ()
        return [*map(str, self.prefix), self.binary, "--socket", str(self.socket), "--shm-name", self.shm_name,
                "--log-level", self.log_level, *config, *map(str, self.args)]

    def start(self):
        env = dict(os.environ) if self.inherit_env else {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        env.update(self.env)
        self._log_from = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "a") as err, open(self.out, "a") as out:
            self.process = subprocess.Popen(self.command(), env=env, stdin=subprocess.DEVNULL, stdout=out,
                                            stderr=err, text=True)
        return self

    def wait_ready(self, timeout=DEADLINE):
        """Until it listens and has published its segment (it listens first); fails with its log
        when it exits or takes longer than `timeout` seconds."""
        end = time.monotonic() + timeout
        while not (answers(self.socket) and shm_exists(self.shm_name)):
            if self.process.poll() is not None:
                raise AssertionError(f"cuslice-scheduler exited ({self.process.returncode}):\n{self.log_text()}")
            if time.monotonic() > end:
                raise AssertionError(f"cuslice-scheduler did not start within {timeout} s:\n{self.log_text()}")
            time.sleep(0.01)
        return self

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def log_text(self):
        """Its stderr so far, in this run."""
        if not self.log.exists():
            return ""
        with open(self.log, "rb") as f:
            f.seek(self._log_from)
            return f.read().decode(errors="replace")

    def stop(self, sig=signal.SIGTERM, timeout=DEADLINE):
        """Sends `sig` (SIGKILL after `timeout` seconds), removes a segment it left; its stderr
        of this run."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(sig)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if shm_exists(self.shm_name):  # a killed daemon leaves its segment
            os.unlink("/dev/shm" + self.shm_name)
        self.stderr = self.log_text()
        return self.stderr

    def __enter__(self):
        if self.process is None:
            self.start()
        return self.wait_ready()

    def __exit__(self, exc_type, exc, tb):
        self.stop()
        if exc_type is not None:
            print(f"--- cuslice-scheduler's log ({self.log})\n{self.stderr}", file=sys.stderr)
        return False
