"""Helpers for end-to-end tests that run the real cuslice-scheduler (and cuslice) against
processes that play hooked applications (fake_hooked_process). Used by tests/scheduler and
tests/cli. The scheduler itself and the shared waits and names come from the test kit
(tests/kit/cuslice_kit.py), re-exported here for the suites that import them from this module.
"""
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kit"))
from cuslice_kit import (DEADLINE, Scheduler, answers, built, default_control_socket,  # noqa: E402,F401
                         eventually, free_port, shm_exists, unique_shm_name)


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
