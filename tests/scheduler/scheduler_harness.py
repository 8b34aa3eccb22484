"""Helpers for end-to-end tests that run the real cuslice-scheduler (and cuslice) against
processes that play hooked applications (fake_hooked_process). Used by tests/scheduler and
tests/cli. Every test gets its own socket and segment name, so tests never meet a node's
scheduler or each other.

Waits are bounded polls (no sleeps that assume a speed): they return as soon as the
condition holds and fail with a message after a generous deadline.
"""
import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

DEADLINE = 15.0  # seconds; only reached when something is broken


def built(name):
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
    """cuslice-scheduler on a private socket and segment; its control socket is the default
    one for that socket (beside tmp_path, never in it) unless `args` say otherwise. `prefix`
    runs it through another command (prlimit)."""

    def __init__(self, tmp_path, args=(), config=None, env=None, prefix=()):
        self.socket = tmp_path / "s.sock"
        self.control_socket = default_control_socket(self.socket)
        if "--control-socket" in args:
            self.control_socket = Path(args[list(args).index("--control-socket") + 1])
        self.shm_name = unique_shm_name()
        self.config = tmp_path / "cuslice.yaml"
        if config is not None:
            self.config.write_text(config)
            args = ("--config", str(self.config), *args)
        full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        full_env.update(env or {})
        self.process = subprocess.Popen(
            [*prefix, str(built("CUSLICE_SCHEDULER_BIN")), "--socket", str(self.socket),
             "--shm-name", self.shm_name, "--log-level", "info", *args],
            env=full_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )

    def wait_ready(self):
        eventually(lambda: answers(self.socket) or self.process.poll() is not None, "the scheduler")
        assert self.process.poll() is None, self.process.communicate()[1]
        # It listens before it publishes the segment.
        eventually(lambda: shm_exists(self.shm_name), "the segment")
        return self

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            out, err = self.process.communicate(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, err = self.process.communicate()
        self.stderr = err
        if shm_exists(self.shm_name):  # a killed daemon leaves its segment
            os.unlink("/dev/shm" + self.shm_name)
        return err


class FakeProcess:
    """A process that registers like the hook, then stays until close()."""

    def __init__(self, scheduler_socket, tenant, *args, command_prefix=(), env=None):
        full_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "CUSLICE_SOCKET": str(scheduler_socket),
        }
        if tenant is not None:
            full_env["CUSLICE_TENANT"] = tenant
        full_env.update(env or {})
        self.process = subprocess.Popen(
            [*map(str, command_prefix), str(built("CUSLICE_FAKE_PROCESS")), *map(str, args)],
            env=full_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )
        line = self.process.stdout.readline()
        if line.strip() != "ready":
            self.process.stdin.close()
            err = self.process.stderr.read()
            self.process.wait(timeout=DEADLINE)
            raise AssertionError(f"fake process did not start (exit {self.process.returncode}): {line}{err}")
        self.pid = self.process.pid

    def close(self):
        self.process.stdin.close()
        assert self.process.wait(timeout=DEADLINE) == 0, self.process.stderr.read()
        self.process.stdout.close()
        self.process.stderr.close()
