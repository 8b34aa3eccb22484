"""`cuslice run` as an ordinary user when someone else took the names its own scheduler would
use first: /tmp/cuslice-<uid> (or $XDG_RUNTIME_DIR/cuslice), its control sibling, or the
segment's name in /dev/shm. None of them may stop the user: cuslice passes over a directory
that is not the user's own and private for a private one of its own, made with mkdtemp
(<dir>-XXXXXX, mode 0700, holding run/ and run-control/), which the user's next commands find
again; and it gives the scheduler a segment name of its own when the usual one is taken.

Run as root (ctest), the directories are planted with other owners (nobody, root) and the
commands run as a throwaway uid; run as another user, only the tests that need no other
owner run: a directory of the user's own left open (mode 0777) is not private either.
"""
import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from scheduler_harness import DEADLINE, eventually
from test_unprivileged import runtime_dir, user  # noqa: F401

NOBODY = 65534


def planted_symlink(path, user):
    target = Path(tempfile.mkdtemp(dir="/tmp"))
    os.chown(target, user.uid, user.uid)
    path.symlink_to(target)


def planted_open_dir(path, user):
    path.mkdir()
    os.chown(path, user.uid, user.uid)
    path.chmod(0o777)


def planted_nobody_dir(path, user):
    path.mkdir(mode=0o755)
    os.chown(path, NOBODY, NOBODY)


def planted_root_dir(path, user):
    path.mkdir(mode=0o700)


def planted_file(path, user):
    path.write_text("")
    os.chown(path, NOBODY, NOBODY)


def env_of(result):
    return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)


def fallbacks(parent, prefix):
    """The private directories cuslice made beside the planted one."""
    pattern = re.compile(re.escape(prefix) + r"-[A-Za-z0-9]{6}")
    return sorted(p for p in parent.iterdir() if pattern.fullmatch(p.name))


def check_private(path, uid):
    st = path.lstat()
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == uid and stat.S_IMODE(st.st_mode) == 0o700, path


def wait_gone(dirs):
    for d in dirs:
        eventually(lambda d=d: not (d / "run" / "cuslice.sock").exists(), "the user's scheduler to exit")


@pytest.fixture
def squatted_tmp(user):
    """/tmp/cuslice-<uid>, its control sibling and the fallbacks made beside them: removed
    before and after."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the test plants /tmp/cuslice-<uid> with other owners")
    path = Path(f"/tmp/cuslice-{user.uid}")

    def clear():
        for p in (path, Path(f"{path}-control"), *fallbacks(Path("/tmp"), path.name)):
            if p.is_symlink() or p.is_file():
                p.unlink()
            elif p.exists():
                shutil.rmtree(p)

    clear()
    yield path
    wait_gone(fallbacks(Path("/tmp"), path.name))
    clear()


@pytest.mark.parametrize("plant", [planted_nobody_dir, planted_root_dir, planted_file, planted_symlink,
                                   planted_open_dir])
@pytest.mark.parametrize("which", ["socket", "control"])
def test_a_tmp_dir_someone_else_made_first_is_passed_over_for_a_private_one(user, squatted_tmp, plant, which):
    planted = squatted_tmp if which == "socket" else Path(f"{squatted_tmp}-control")
    plant(planted, user)
    try:
        result = user.run("run", "--", "env")
        assert result.returncode == 0, result.stderr
        made = fallbacks(Path("/tmp"), squatted_tmp.name)
        assert len(made) == 1, made
        check_private(made[0], user.uid)
        for d in (made[0] / "run", made[0] / "run-control"):
            check_private(d, user.uid)
        assert env_of(result)["CUSLICE_SOCKET"] == f"{made[0]}/run/cuslice.sock"
        assert not (squatted_tmp / "cuslice.sock").exists()
        # Found again by the next command, rather than a directory more.
        again = user.run("run", "--", "env")
        assert again.returncode == 0, again.stderr
        assert env_of(again)["CUSLICE_SOCKET"] == f"{made[0]}/run/cuslice.sock"
        assert fallbacks(Path("/tmp"), squatted_tmp.name) == made
    finally:
        if planted.is_symlink():
            shutil.rmtree(planted.resolve(), ignore_errors=True)


def test_a_runtime_dir_left_open_is_passed_over_for_a_private_one(user, runtime_dir):
    # The user's own directory, but mode 0777: anybody could have put a socket in it.
    own = runtime_dir / "cuslice"
    own.mkdir()
    os.chown(own, user.uid, user.uid)
    own.chmod(0o777)
    result = user.run("run", "--", "env", XDG_RUNTIME_DIR=runtime_dir)
    assert result.returncode == 0, result.stderr
    made = fallbacks(runtime_dir, "cuslice")
    assert len(made) == 1, made
    check_private(made[0], user.uid)
    assert env_of(result)["CUSLICE_SOCKET"] == f"{made[0]}/run/cuslice.sock"
    assert stat.S_IMODE(own.stat().st_mode) == 0o777 and not list(own.iterdir())  # left as it was
    wait_gone(made)


def fnv1a(text):
    """scheduler_autostart.cpp's shm_name_for_socket hash."""
    h = 0xcbf29ce484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"/cuslice-{h:016x}"


def test_a_segment_name_someone_else_took_is_replaced_by_one_of_its_own(user, runtime_dir):
    if os.geteuid() != 0:
        pytest.skip("needs root: the test plants a segment of another owner")
    socket = runtime_dir / "cuslice" / "cuslice.sock"
    squatted = Path("/dev/shm" + fnv1a(str(socket)))
    squatted.write_bytes(b"")
    os.chown(squatted, NOBODY, NOBODY)
    command = user.popen("run", "--", user.fake_process, "--reserve", 1 << 20, XDG_RUNTIME_DIR=runtime_dir)
    try:
        line = command.stdout.readline()
        assert line.strip() == "ready", line + command.stderr.read()
        result = user.run("status", "--json", XDG_RUNTIME_DIR=runtime_dir)
        assert result.returncode == 0, result.stderr
        doc = json.loads(result.stdout)
        assert doc["daemon"]["socket"] == str(socket)
        name = doc["daemon"]["shm_name"]
        assert name.startswith(fnv1a(str(socket)) + "-") and name != fnv1a(str(socket)), name
        assert Path("/dev/shm" + name).stat().st_uid == user.uid
    finally:
        command.stdin.close()
        assert command.wait(timeout=DEADLINE) == 0, command.stderr.read()
        command.stdout.close()
        command.stderr.close()
        eventually(lambda: not socket.exists(), "the user's scheduler to exit")
        squatted.unlink()
