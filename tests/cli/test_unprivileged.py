"""`cuslice run` as an ordinary user on a node with no scheduler: no set-up, a scheduler of
the user's own in a private runtime directory (test_runtime_dir_squat.py: when someone else
took its name first).

The tests run as root under ctest, so they drop to a throwaway uid with setpriv (util-linux)
and run copies of the programs from a directory that uid can read. Run as another user,
they run as that user, except those that need root to plant directories of other owners.
"""
import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from scheduler_harness import DEADLINE, answers, eventually

SYSTEM_SOCKET = "/run/cuslice/cuslice.sock"
NO_SCHEDULER = 4  # protocol/exit_codes.h


def built(name):
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run these tests through ctest, which sets it")
    return Path(value)


def pick_uid():
    """A uid no account uses and with no /tmp/cuslice-<uid> left over."""
    for offset in range(2000):
        uid = 61000 + (os.getpid() + offset) % 4000
        if not Path(f"/tmp/cuslice-{uid}").exists():
            try:
                import pwd
                pwd.getpwuid(uid)
                continue
            except KeyError:
                return uid
    pytest.skip("no free uid in 61000-64999 to run as")


class User:
    """Runs the copied programs as one user, with only the environment given."""

    def __init__(self, uid, root_dir):
        self.uid = uid
        self.root = root_dir
        self.bin = root_dir / "bin"
        self.cuslice = self.bin / "cuslice"
        self.fake_process = self.bin / "fake_hooked_process"
        self.prefix = ([] if uid == os.geteuid() else
                       ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"])

    def env(self, **extra):
        env = {"PATH": "/usr/bin:/bin", "HOME": "/"}
        env.update({k: str(v) for k, v in extra.items() if v is not None})
        return env

    def run(self, *args, **env):
        return subprocess.run([*self.prefix, str(self.cuslice), *map(str, args)], env=self.env(**env),
                              capture_output=True, text=True, timeout=DEADLINE * 2)

    def popen(self, *args, **env):
        return subprocess.Popen([*self.prefix, str(self.cuslice), *map(str, args)], env=self.env(**env),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def user():
    if answers(SYSTEM_SOCKET):
        pytest.skip(f"a system scheduler answers on {SYSTEM_SOCKET}: `run` would join it, which is not "
                    "what these tests are about")
    uid = pick_uid() if os.geteuid() == 0 else os.geteuid()
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("setpriv (util-linux) is not installed: cannot drop root to test an ordinary user")
        probe = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "true"],
                               capture_output=True, text=True)
        if probe.returncode != 0:
            pytest.skip(f"cannot drop privileges with setpriv here: {probe.stderr.strip()}")
    # The programs, where the user can read them (the build tree may be private): cuslice
    # finds the scheduler beside it and the hook in ../lib, as in an installation.
    root_dir = Path(tempfile.mkdtemp(prefix="cuslice-user-test-", dir="/tmp"))
    root_dir.chmod(0o755)
    (root_dir / "bin").mkdir(mode=0o755)
    (root_dir / "lib").mkdir(mode=0o755)
    shutil.copy2(built("CUSLICE_BIN"), root_dir / "bin" / "cuslice")
    shutil.copy2(built("CUSLICE_SCHEDULER_BIN"), root_dir / "bin" / "cuslice-scheduler")
    shutil.copy2(built("CUSLICE_FAKE_PROCESS"), root_dir / "bin" / "fake_hooked_process")
    shutil.copy2(built("CUSLICE_TEST_HOOK"), root_dir / "lib" / "libcuslice.so")
    for path in root_dir.rglob("*"):
        path.chmod(0o755)
    yield User(uid, root_dir)
    shutil.rmtree(root_dir)


@pytest.fixture
def runtime_dir(user):
    """An $XDG_RUNTIME_DIR of the user's, as logind makes one."""
    path = Path(tempfile.mkdtemp(prefix="cuslice-xdg-", dir="/tmp"))
    os.chown(path, user.uid, user.uid)
    path.chmod(0o700)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def tmp_fallback(user):
    """/tmp/cuslice-<uid>, removed before and after with its control sibling (the uid is a
    throwaway one)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the test plants /tmp/cuslice-<uid> with other owners")
    path = Path(f"/tmp/cuslice-{user.uid}")

    def clear():
        for p in (path, Path(f"{path}-control")):
            if p.is_symlink() or p.is_file():
                p.unlink()
            elif p.exists():
                shutil.rmtree(p)

    clear()
    yield path
    # The scheduler, if one was started there, exits by itself once its client is gone.
    eventually(lambda: not (path / "cuslice.sock").exists(), "the user's scheduler to exit")
    clear()


def test_run_as_an_ordinary_user_starts_a_scheduler_of_their_own(user, runtime_dir):
    own_dir = runtime_dir / "cuslice"
    socket = own_dir / "cuslice.sock"
    command = user.popen("run", "--memory", "4GiB", "--", user.fake_process, "--reserve", 1 << 20,
                         XDG_RUNTIME_DIR=runtime_dir)
    try:
        line = command.stdout.readline()
        assert line.strip() == "ready", line + command.stderr.read()
        for d in (own_dir, runtime_dir / "cuslice-control"):  # the control socket's beside it
            st = d.lstat()
            assert stat.S_ISDIR(st.st_mode) and st.st_uid == user.uid and stat.S_IMODE(st.st_mode) == 0o700, d
        control = (runtime_dir / "cuslice-control" / "cuslice.sock").lstat()
        assert stat.S_ISSOCK(control.st_mode) and stat.S_IMODE(control.st_mode) == 0o600

        # `status` as that user finds the same scheduler without being told where.
        result = user.run("status", "--json", XDG_RUNTIME_DIR=runtime_dir)
        assert result.returncode == 0, result.stderr
        doc = json.loads(result.stdout)
        assert doc["daemon"]["mode"] == "ephemeral"
        assert doc["daemon"]["socket"] == str(socket)
        assert doc["daemon"]["shm_name"] not in ("/cuslice", "")  # not the node's segment
        tenants = {t["name"]: t for t in doc["tenants"]}
        own = f"{user.fake_process.name}-{command.pid}"  # the command's own tenant
        assert tenants[own]["pids"] == [command.pid]
        assert tenants[own]["memory_quota_bytes"] == 4 << 30
        assert Path("/dev/shm" + doc["daemon"]["shm_name"]).stat().st_uid == user.uid
    finally:
        command.stdin.close()
        assert command.wait(timeout=DEADLINE) == 0, command.stderr.read()
        command.stdout.close()
        command.stderr.close()
    eventually(lambda: not socket.exists(), "the user's scheduler to exit after its last client")
    log = (own_dir / "cuslice.sock.log")
    assert log.stat().st_uid == user.uid and stat.S_IMODE(log.stat().st_mode) == 0o600


def test_status_as_an_ordinary_user_with_no_scheduler_names_both_places(user, runtime_dir):
    result = user.run("status", "--json", "--watch", XDG_RUNTIME_DIR=runtime_dir)
    assert result.returncode == NO_SCHEDULER, result.stderr
    assert result.stdout == ""
    assert (f"no scheduler answers on {SYSTEM_SOCKET} or {runtime_dir}/cuslice/cuslice.sock"
            in result.stderr.splitlines()[0])


def test_without_a_runtime_dir_the_scheduler_lives_in_a_private_tmp_dir(user, tmp_fallback):
    # An XDG_RUNTIME_DIR inherited from another user (su, sudo) is passed over.
    result = user.run("run", "--", "env", XDG_RUNTIME_DIR="/root")
    assert result.returncode == 0, result.stderr
    env = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert env["CUSLICE_SOCKET"] == f"{tmp_fallback}/cuslice.sock"
    st = tmp_fallback.lstat()
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == user.uid and stat.S_IMODE(st.st_mode) == 0o700


def test_a_control_directory_the_user_cannot_make_is_named_before_anything_starts(user):
    if os.geteuid() != 0:
        pytest.skip("needs root: the test makes a directory the user cannot write")
    top = Path(tempfile.mkdtemp(prefix="cuslice-user-test-", dir="/tmp"))  # root's
    top.chmod(0o755)
    try:
        shared = top / "shared"  # the user's: the socket may go here, its control socket beside it may not
        shared.mkdir()
        os.chown(shared, user.uid, user.uid)
        result = user.run("run", "--socket", shared / "x.sock", "--", "true")
        assert result.returncode == 1, result.stderr
        assert f"cannot create {top}/shared-control for its control socket: Permission denied" in result.stderr
        assert "--control-socket PATH" in result.stderr
        assert not (shared / "x.sock").exists()
        # Told where, it works.
        private = top / "mine"
        private.mkdir(mode=0o700)
        os.chown(private, user.uid, user.uid)
        result = user.run("run", "--socket", shared / "x.sock", "--control-socket", private / "c.sock", "--", "true")
        assert result.returncode == 0, result.stderr
    finally:
        eventually(lambda: not (top / "shared" / "x.sock").exists(), "the user's scheduler to exit")
        shutil.rmtree(top, ignore_errors=True)
