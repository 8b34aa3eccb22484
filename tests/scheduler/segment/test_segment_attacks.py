"""The shared memory as a trust boundary: what an unprivileged local user whose processes
belong to one tenant ("mallory") can try against it, through segment_attacker. Every attempt
must be refused, and neither the scheduler nor the other tenant ("victim") may notice: their
status and a running worker are checked after each attack.

The tests run as root under ctest: the daemon and the victim's processes run as root, the
attacker as uid 65534 through setpriv, from a directory that uid can read. Without root or
setpriv they skip, saying why.
"""
import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from scheduler_harness import DEADLINE, FakeProcess, Scheduler, built, eventually

ATTACKER_UID = 65534
MiB = 1 << 20
GiB = 1 << 30
# Equal priorities: mallory's forged demand competes with the victim by shares, as any
# tenant's real demand may; it must not win more than that.
CONFIG = f"""\
scheduler: {{quantum: 10ms}}
tenants:
  - {{name: victim, memory: 1GiB, allow_env: false, match: {{uid: 0}}}}
  - {{name: mallory, memory: 1GiB, match: {{uid: {ATTACKER_UID}}}}}
"""
DROP = ["setpriv", f"--reuid={ATTACKER_UID}", f"--regid={ATTACKER_UID}", "--clear-groups"]


@pytest.fixture(scope="module")
def as_root():
    if os.geteuid() != 0:
        pytest.skip("needs root: the daemon and the victim must run as another user than the attacker, "
                    "and the owner test changes the segment's owner")


@pytest.fixture(scope="module")
def can_drop(as_root):
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed: cannot run the attacker as an unprivileged user")
    r = subprocess.run([*DROP, "id", "-u"], capture_output=True, text=True, timeout=DEADLINE)
    if r.returncode != 0 or r.stdout.strip() != str(ATTACKER_UID):
        pytest.skip(f"setpriv cannot drop to uid {ATTACKER_UID} here: {r.stderr.strip() or r.stdout.strip()}")


@pytest.fixture
def world(can_drop):
    """A scheduler in a directory the attacker can reach, and the attacker's program there."""
    d = Path(tempfile.mkdtemp(prefix="cuslice-attack-"))
    d.chmod(0o755)
    attacker = d / "segment_attacker"
    shutil.copy2(built("CUSLICE_ATTACKER"), attacker)
    attacker.chmod(0o755)
    s = Scheduler(d, config=CONFIG).wait_ready()
    started = []
    yield d, s, started
    for p in started:
        if p.process.poll() is None:
            p.close()
    s.stop()
    shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(s.control_socket.parent, ignore_errors=True)


class Attacker:
    """segment_attacker as uid 65534, registered in mallory until close()."""

    def __init__(self, directory, scheduler, *attacks):
        self.process = subprocess.Popen(
            [*DROP, str(directory / "segment_attacker"), str(scheduler.socket), scheduler.shm_name, "mallory",
             *attacks],
            env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        self.lines = []
        for line in self.process.stdout:
            self.lines.append(line.strip())
            if line.strip() == "done":
                break
        else:
            self.process.wait(timeout=DEADLINE)
            raise AssertionError(f"the attacker stopped early (exit {self.process.returncode}): "
                                 f"{self.lines} {self.process.stderr.read()}")

    def verdicts(self):
        return [line for line in self.lines if line.startswith(("refused ", "ALLOWED "))]

    def allowed(self):
        return [line for line in self.lines if line.startswith("ALLOWED ")]

    def close(self):
        self.process.stdin.close()
        code = self.process.wait(timeout=DEADLINE)
        self.process.stdout.close()
        self.process.stderr.close()
        return code


def status(s):
    r = subprocess.run([str(built("CUSLICE_BIN")), "status", "--json", "--socket", str(s.socket)],
                       capture_output=True, text=True, timeout=DEADLINE, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def tenants(doc):
    return {t["name"]: t for t in doc["tenants"]}


def row(doc, name, gpu=0):
    return {r["name"]: r for r in doc["gpus"][gpu]["tenants"]}[name] if len(doc["gpus"]) > gpu else {}


def definitions(doc):
    """What each tenant is allowed, as status shows it."""
    keep = ("priority", "share", "limit", "memory_quota_bytes", "memory_quota_fraction")
    return {t["name"]: {k: t.get(k) for k in keep} for t in doc["tenants"]}


def test_the_segment_is_the_daemons_and_read_only_for_others(world):
    d, s, started = world
    st = os.stat("/dev/shm" + s.shm_name)
    assert stat.S_IMODE(st.st_mode) == 0o644 and st.st_uid == os.geteuid(), oct(st.st_mode)
    started.append(FakeProcess(s.socket, "victim", "--reserve", 256 * MiB))
    before = status(s)

    a = Attacker(d, s, "segment")
    verdicts, allowed = a.verdicts(), a.allowed()
    assert a.close() == 0, verdicts
    assert not allowed, allowed
    assert len(verdicts) == 12, verdicts  # by its name, and through the descriptor the reply brought

    after = status(s)
    assert definitions(after) == definitions(before)
    assert tenants(after)["victim"]["memory_quota_bytes"] == GiB and tenants(after)["victim"]["priority"] == "normal"
    assert row(after, "victim")["memory_used_bytes"] == 256 * MiB
    assert s.process.poll() is None


def test_a_tenant_region_cannot_be_resized(world):
    d, s, _ = world
    a = Attacker(d, s, "resize")
    verdicts, allowed = a.verdicts(), a.allowed()
    assert a.close() == 0, verdicts
    assert not allowed, allowed
    assert len(verdicts) == 8, verdicts
    assert s.process.poll() is None


def test_a_poisoned_tenant_region_harms_neither_the_daemon_nor_the_other_tenant(world):
    d, s, started = world
    # The victim's running worker: memory held, GPU time reported, the token used.
    started.append(FakeProcess(s.socket, "victim", "--reserve", 256 * MiB, "--gpu-time-ms", 50))
    eventually(lambda: row(status(s), "victim").get("gpu_seconds") == pytest.approx(0.05), "the victim's GPU time")
    before = status(s)

    a = Attacker(d, s, "poison")
    assert "poisoned" in a.lines
    during = status(s)
    assert s.process.poll() is None, "the scheduler died of a poisoned region"
    assert definitions(during) == definitions(before)
    victim = row(during, "victim")
    assert victim["memory_used_bytes"] == 256 * MiB
    assert victim["gpu_seconds"] == pytest.approx(0.05)
    assert victim["oom_refusals"] == 0
    assert tenants(during)["victim"]["pids"] == tenants(before)["victim"]["pids"]
    # Mallory's own counters move no faster than time allows, whatever its region says.
    mallory = row(during, "mallory")
    assert mallory["gpu_seconds"] < 3600 * 1024 and mallory["token_wait_seconds"] < 3600 * 1024 * 64
    assert mallory["oom_refusals"] < 3600 * 1e9

    # The victim still gets its memory up to its quota, no more, and the token.
    started.append(FakeProcess(s.socket, "victim", "--reserve", 700 * MiB, "--over-quota", 100 * MiB,
                               "--gpu-time-ms", 20))
    started.pop().close()
    assert s.process.poll() is None

    # Mallory leaves, its process record claiming every byte there is: the victim keeps its own.
    assert a.close() == 0
    after = eventually(lambda: (lambda doc: doc if tenants(doc)["mallory"]["pids"] == [] else None)(status(s)),
                       "mallory to leave")
    assert s.process.poll() is None
    assert row(after, "victim")["memory_used_bytes"] == 256 * MiB
    assert row(after, "victim")["gpu_seconds"] == pytest.approx(0.07)
    assert row(after, "victim")["oom_refusals"] == 1
    assert row(after, "mallory")["memory_used_bytes"] == 0


def test_another_tenants_region_is_out_of_reach(world):
    d, s, started = world
    started.append(FakeProcess(s.socket, "victim", "--reserve", 64 * MiB))
    a = Attacker(d, s, "steal=victim")
    verdicts, allowed = a.verdicts(), a.allowed()
    assert a.close() == 0, verdicts
    assert not allowed, allowed
    # Registering as the victim; the daemon's and the victim process's fd and map_files
    # folders and descriptors.
    assert len(verdicts) == 7, verdicts
    # A memfd has no name to open: nothing of the scheduler's but its segment is in /dev/shm.
    ours = [p.name for p in Path("/dev/shm").iterdir() if p.name.startswith(s.shm_name[1:])]
    assert ours == [s.shm_name[1:]], ours
    assert row(status(s), "victim")["memory_used_bytes"] == 64 * MiB


def attach(s):
    """A process registering the way the hook does: (exit status, stderr)."""
    r = subprocess.run([str(built("CUSLICE_FAKE_PROCESS"))], stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=DEADLINE,
                       env={"PATH": "/usr/bin:/bin", "CUSLICE_SOCKET": str(s.socket), "CUSLICE_TENANT": "a"})
    return r.returncode, r.stderr


def test_the_hook_refuses_a_segment_the_daemons_user_does_not_own(as_root, tmp_path):
    s = Scheduler(tmp_path, config="tenants:\n  - {name: a, allow_env: true}\n").wait_ready()
    path = "/dev/shm" + s.shm_name
    try:
        assert attach(s) == (0, "")
        # Another user's file under the name the daemon gives (as if planted there).
        os.chown(path, ATTACKER_UID, ATTACKER_UID)
        code, err = attach(s)
        assert code == 100 and "refusing the scheduler's shared memory" in err, err
        # The daemon's own, but writable by others.
        os.chown(path, 0, 0)
        os.chmod(path, 0o666)
        code, err = attach(s)
        assert code == 100 and "refusing the scheduler's shared memory" in err, err
        os.chmod(path, 0o644)
        assert attach(s) == (0, "")
    finally:
        s.stop()
