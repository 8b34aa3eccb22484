"""A real hooked process (tests/scheduler/clients/cuda_app.cpp under libcuslice.so, over the
fake driver) against a scheduler that has no process slot it may take, every slot held by
other users' registrations: it must not run ungated. Its hook tries again for 5 s
(client::kBusyWaitSeconds), then fails CUDA's initialisation with the reason on stderr, so
the application never reaches the GPU. Once a slot is free again, the next process
registers and runs gated: in its tenant, its memory charged there.

The slots are taken the way test_socket_attacks.py takes them, by socket_attacker's `hold`
run as other uids through setpriv. These tests need root (to start the scheduler as root
and act as other users); they skip otherwise.
"""
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from scheduler_harness import DEADLINE, Scheduler, built, eventually

MiB = 1 << 20
SLOTS = 1024  # shm::kMaxProcesses
RESERVED = 64  # Registrar::kReservedSlots: the last free slots, for tenants with fewer than
SMALL = 4  # Registrar::kSmallTenantProcesses processes
BIG_USERS = (65530, 65531, 65532, 65533)
NOBODY = 65534
PER_BIG_USER = (SLOTS - RESERVED) // len(BIG_USERS)  # 240: within one user's 256
SMALL_TENANTS = RESERVED // SMALL  # 16 tenants of 4 processes take the reserved slots

CUDA_INIT_REFUSED = 3  # CUDA_ERROR_NOT_INITIALIZED: what the hook's cuInit answers then
EXIT_INIT_FAILED = 3  # cuda_app's exit status when cuInit failed
BUSY_WAIT_S = 5.0  # client::kBusyWaitSeconds

CONFIG = """\
scheduler: {quantum: 10ms, gpu_memory: 16GiB}
tenants:
  - name: victim
    memory: 4GiB
    allow_env: false
    match: {uid: 0}
""" + "".join(f"  - {{name: big{i}, memory: 1GiB, allow_env: true}}\n" for i in range(len(BIG_USERS))) + \
    "".join(f"  - {{name: small{i}, memory: 1GiB, allow_env: true}}\n" for i in range(SMALL_TENANTS))

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None
                                or shutil.which("prlimit") is None,
                                reason="needs root, setpriv and prlimit to act as other users")


def status_json(scheduler):
    result = subprocess.run([str(built("CUSLICE_BIN")), "status", "--json", "--socket", str(scheduler.socket)],
                            capture_output=True, text=True, timeout=DEADLINE)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def status(scheduler):
    return {t["name"]: t for t in status_json(scheduler)["tenants"]}


def memory_used(scheduler, tenant):
    """The tenant's usage on GPU 0, as `cuslice status` shows it."""
    gpus = status_json(scheduler)["gpus"]
    return next(row["memory_used_bytes"] for row in gpus[0]["tenants"] if row["name"] == tenant)


def hold(scheduler, uid, tenant, count):
    """`count` registrations in `tenant` by `uid`, kept until the returned process's stdin
    closes; returns it once all were answered, with how many were accepted."""
    hog = subprocess.Popen(["prlimit", "--nofile=4096", "setpriv", f"--reuid={uid}", f"--regid={uid}",
                            "--clear-groups", "--", str(built("CUSLICE_SOCKET_ATTACKER")), "hold",
                            str(scheduler.socket), tenant, str(count)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    if not select.select([hog.stdout], [], [], DEADLINE * 4)[0]:
        hog.kill()
        raise AssertionError(f"uid {uid}'s registrations in {tenant} went unanswered")
    words = hog.stdout.readline().split()
    assert words[:1] == ["ok"], f"uid {uid} in {tenant}: {words}"
    return hog, int(words[1])


def release(hog):
    hog.stdin.close()
    hog.wait(timeout=DEADLINE)


def start_app(scheduler, nbytes):
    """cuda_app under the hook, in the scheduler's reach, as root: tenant victim by its match
    rule (no CUSLICE_TENANT, so a hook that did not reach the scheduler would run it ungated,
    and the test would see it)."""
    preload = ":".join(p for p in (os.environ.get("CUSLICE_TEST_PRELOAD", ""), str(built("CUSLICE_HOOK"))) if p)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LD_PRELOAD": preload,
        "LD_LIBRARY_PATH": str(built("CUSLICE_FAKE_DRIVER_DIR")),
        "CUSLICE_SOCKET": str(scheduler.socket),
    }
    return subprocess.Popen([str(built("CUSLICE_CUDA_APP")), str(nbytes)], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def answer(app, timeout):
    """cuda_app's "init RC alloc RC" line, as (init, alloc)."""
    assert select.select([app.stdout], [], [], timeout)[0], f"cuda_app said nothing within {timeout} s"
    words = app.stdout.readline().split()
    assert len(words) == 4 and words[0] == "init" and words[2] == "alloc", (words, app.stderr.read())
    return int(words[1]), int(words[3])


@pytest.fixture
def scheduler():
    # In a directory the other users can reach (pytest's tmp_path is root's alone).
    d = Path(tempfile.mkdtemp(prefix="cuslice-admission-"))
    d.chmod(0o755)
    # 1024 registrations take two descriptors each, and the scheduler keeps 2560 back. Its
    # log goes to a file: a line per registration would fill a pipe nobody reads meanwhile.
    log = d.parent / f"{d.name}.log"
    s = Scheduler(d, config=CONFIG, prefix=("prlimit", "--nofile=8192:8192", "sh", "-c", 'exec "$@" 2>"$0"',
                                            str(log))).wait_ready()
    yield s
    s.stop()
    s.log = log.read_text()
    log.unlink()
    shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(d.parent / f"{d.name}-control", ignore_errors=True)  # the control socket's


def test_a_process_the_scheduler_has_no_room_for_fails_cuda_initialisation_and_does_not_run(scheduler):
    hogs = []
    try:
        # Five users take every slot: four of them 240 each in tenants of their own, the fifth
        # the 64 slots kept for small tenants, 4 in each of 16.
        for i, uid in enumerate(BIG_USERS):
            hog, held = hold(scheduler, uid, f"big{i}", PER_BIG_USER)
            hogs.append(hog)
            assert held == PER_BIG_USER, f"uid {uid} holds {held} slots"
        for i in range(SMALL_TENANTS):
            hog, held = hold(scheduler, NOBODY, f"small{i}", SMALL)
            hogs.append(hog)
            assert held == SMALL, f"small{i} holds {held} slots"
        assert len(status(scheduler)["victim"]["pids"]) == 0

        started = time.monotonic()
        app = start_app(scheduler, 64 * MiB)
        try:
            init, alloc = answer(app, DEADLINE * 2)
            took = time.monotonic() - started
            # Not run ungated: cuInit failed, so nothing reached the driver, not even the
            # allocation an application that ignores the error goes on to make.
            assert init == CUDA_INIT_REFUSED, f"cuInit answered {init}: the process ran without the scheduler"
            assert alloc != 0, "an allocation succeeded in a process the scheduler had no room for"
            app.stdin.close()
            assert app.wait(timeout=DEADLINE) == EXIT_INIT_FAILED
            err = app.stderr.read()
        finally:
            if app.poll() is None:
                app.kill()
                app.wait()
        # After the wait the hook documents, with the reason.
        assert took >= BUSY_WAIT_S, f"gave up after {took:.1f} s, before the {BUSY_WAIT_S:.0f} s wait"
        assert took < BUSY_WAIT_S + DEADLINE, f"took {took:.1f} s"
        assert "the scheduler has no room for this process" in err, err
        assert "all process slots are in use" in err, err
        assert "CUDA initialisation refused" in err, err
        assert status(scheduler)["victim"]["pids"] == []

        # Room again: one small tenant's processes leave, and the next process registers (the
        # victim has fewer than 4, so a reserved slot is its to take) and runs gated.
        release(hogs.pop())
        app = start_app(scheduler, 64 * MiB)
        try:
            assert answer(app, DEADLINE * 2) == (0, 0), app.stderr.read() if app.poll() is not None else ""
            assert status(scheduler)["victim"]["pids"] == [app.pid]
            eventually(lambda: memory_used(scheduler, "victim") >= 64 * MiB, "the allocation charged to victim")
        finally:
            app.stdin.close()
            assert app.wait(timeout=DEADLINE) == 0, app.stderr.read()
        eventually(lambda: status(scheduler)["victim"]["pids"] == [], "the process's slot given back")
    finally:
        for hog in hogs:
            hog.stdin.close()
            hog.kill()
            hog.wait(timeout=DEADLINE)
