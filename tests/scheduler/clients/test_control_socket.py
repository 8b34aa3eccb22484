"""The scheduler's two sockets (protocol/socket_protocol.h, "Two sockets"): requests that
change it or hand out credentials (reload, ensure-tenant, the device plugin's apply, remove
and list) are refused on the tenant socket whoever sends them, root included: a tenant
container that runs as root without a user namespace is uid 0 on the socket it is given.
The same requests work on the control socket, which lives in a directory of its own, is
open to root and the scheduler's user only, and is locked like the tenant socket.

These tests run as root under ctest, which is the container's case. The requests are made
by tests/scheduler/clients/socket_attacker.cpp, which speaks the protocol by hand; the tests that
act as another user need root and setpriv, and skip without.
"""
import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from scheduler_harness import DEADLINE, FakeProcess, Scheduler, built, default_control_socket, eventually

NOBODY = 65534
FORBIDDEN = 3  # wire::ControlStatus::kForbidden
CONFIG = "scheduler: {quantum: 10ms, gpu_memory: 16GiB}\ntenants:\n  - {name: a, allow_env: true, memory: 1GiB}\n"
KEY = "0123456789abcdef0123456789abcdef"


def request(*args, user=None):
    prefix = [] if user is None else ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "--"]
    result = subprocess.run([*prefix, str(built("CUSLICE_SOCKET_ATTACKER")), *map(str, args)],
                            capture_output=True, text=True, timeout=DEADLINE)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def status(scheduler):
    result = subprocess.run([str(built("CUSLICE_BIN")), "status", "--json", "--socket", str(scheduler.socket)],
                            capture_output=True, text=True, timeout=DEADLINE)
    assert result.returncode == 0, result.stderr
    return {t["name"]: t for t in json.loads(result.stdout)["tenants"] if t["state"] == "active"}


def refused_on_tenant_socket(answer, scheduler, what):
    assert answer == (f"status {FORBIDDEN} {what} is accepted only on the scheduler's control socket "
                      f"({scheduler.control_socket}), not on the socket tenants share"), answer


@pytest.fixture
def configured(tmp_path):
    s = Scheduler(tmp_path, config=CONFIG).wait_ready()
    yield s
    s.stop()


@pytest.fixture
def ephemeral(tmp_path):
    s = Scheduler(tmp_path, args=("--ephemeral",)).wait_ready()
    yield s
    s.stop()


def test_the_control_socket_is_beside_the_tenant_sockets_directory_and_private(configured):
    assert configured.control_socket == configured.socket.parent.parent / (
        configured.socket.parent.name + "-control") / "s.sock"
    tenant = configured.socket.stat()
    control = configured.control_socket.stat()
    directory = configured.control_socket.parent.stat()
    assert stat.S_ISSOCK(control.st_mode) and stat.S_IMODE(control.st_mode) == 0o600
    assert stat.S_IMODE(directory.st_mode) == 0o700
    assert control.st_uid == directory.st_uid == os.geteuid()
    assert stat.S_IMODE(tenant.st_mode) == 0o666
    configured.stop()
    assert not configured.control_socket.exists() and not configured.socket.exists()


def test_reload_on_the_tenant_socket_is_refused_even_from_root(configured):
    configured.config.write_text(CONFIG + "  - {name: b, allow_env: true}\n")
    refused_on_tenant_socket(request("control", configured.socket, "reload"), configured, "reload")
    assert set(status(configured)) == {"a"}
    assert "refused a control request" in configured.stop()


def test_reload_on_the_control_socket_works(configured):
    configured.config.write_text(CONFIG + "  - {name: b, allow_env: true}\n")
    assert request("control", configured.control_socket, "reload") == f"status 0 reloaded {configured.config}"
    assert set(status(configured)) == {"a", "b"}


def test_describe_is_answered_on_both_sockets(configured):
    for path in (configured.socket, configured.control_socket):
        assert request("control", path, "describe") == "status 0", path


def test_ensure_tenant_on_the_tenant_socket_is_refused_even_from_root(ephemeral):
    refused_on_tenant_socket(request("control", ephemeral.socket, "ensure", "mine"), ephemeral, "adding a tenant")
    assert status(ephemeral) == {}
    answer = request("control", ephemeral.control_socket, "ensure", "mine")
    assert answer.startswith("status 0 ") and "added tenant `mine`" in answer, answer
    # The request's connection was its lease: the tenant went with it.
    eventually(lambda: "mine" not in status(ephemeral), "the tenant to go with its lease")


def test_plugin_requests_on_the_tenant_socket_are_refused_even_from_root(configured):
    for args in (("list",), ("apply", "pod-a", KEY), ("remove", "a")):
        refused_on_tenant_socket(request("plugin", configured.socket, *args), configured, "managing plugin tenants")
    assert set(status(configured)) == {"a"}


def test_plugin_requests_on_the_control_socket_work(configured):
    assert request("plugin", configured.control_socket, "apply", "pod-a", KEY).startswith("status 0 added tenant")
    assert request("plugin", configured.control_socket, "list") == f"listed 1 pod-a:{KEY}"
    assert status(configured)["pod-a"]["memory_quota_bytes"] == 1 << 30
    # Neither the credential nor the tenant is reachable from the tenant socket.
    refused_on_tenant_socket(request("plugin", configured.socket, "list"), configured, "managing plugin tenants")
    refused_on_tenant_socket(request("plugin", configured.socket, "remove", "pod-a"), configured,
                             "managing plugin tenants")
    assert "pod-a" in status(configured)
    assert request("plugin", configured.control_socket, "remove", "pod-a").startswith("status 0 ")
    assert "pod-a" not in status(configured)


def test_processes_register_on_the_tenant_socket_only(configured):
    answer = request("register", configured.control_socket, "a", 0)
    assert answer == (f"refused 1 processes register on the tenant socket ({configured.socket}), "
                      "not on the control socket"), answer
    FakeProcess(configured.socket, "a").close()


needs_setpriv = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                   reason="needs root and setpriv to act as another user")


@needs_setpriv
def test_another_user_cannot_reach_the_control_socket_and_is_refused_if_let_in():
    # In /tmp, so that the other user can reach both sockets' directories' parent.
    world = Path(tempfile.mkdtemp(prefix="cuslice-control-"))
    world.chmod(0o755)
    s = Scheduler(world, config=CONFIG).wait_ready()
    try:
        assert request("control", s.socket, "describe", user=NOBODY) == "status 0"
        assert request("control", s.control_socket, "reload", user=NOBODY) == "unreachable Permission denied"
        assert request("plugin", s.control_socket, "list", user=NOBODY) == "unreachable Permission denied"
        # An operator who opens the directory and the socket still lets nobody else in.
        s.control_socket.parent.chmod(0o755)
        s.control_socket.chmod(0o666)
        assert request("control", s.control_socket, "reload", user=NOBODY) == (
            f"status {FORBIDDEN} uid {NOBODY} may not change this scheduler (only root and uid 0)")
        assert request("plugin", s.control_socket, "list", user=NOBODY) == (
            f"status {FORBIDDEN} uid {NOBODY} may not manage plugin tenants (only root and uid 0)")
    finally:
        s.stop()
        shutil.rmtree(world, ignore_errors=True)
        shutil.rmtree(s.control_socket.parent, ignore_errors=True)


def test_the_control_socket_path_comes_from_the_flag_or_the_environment(tmp_path):
    tenant_dir = tmp_path / "tenant"  # everything beside it is out of the tenants' reach
    by_flag = tmp_path / "elsewhere" / "ctl.sock"
    s = Scheduler(tenant_dir, args=("--ephemeral", "--control-socket", by_flag)).wait_ready()
    try:
        assert stat.S_IMODE(by_flag.stat().st_mode) == 0o600
        assert not default_control_socket(s.socket).exists()
        assert request("control", by_flag, "ensure", "x").startswith("status 0 ")
    finally:
        s.stop()
    by_env = tmp_path / "from-env" / "ctl.sock"
    s = Scheduler(tenant_dir, args=("--ephemeral",), env={"CUSLICE_CONTROL_SOCKET": str(by_env)}).wait_ready()
    try:
        assert request("control", by_env, "ensure", "x").startswith("status 0 ")
    finally:
        s.stop()


@pytest.mark.parametrize("inside", ["s.control.sock", "sub/c.sock"])
def test_a_control_socket_where_tenants_are_given_the_tenant_socket_is_refused(tmp_path, inside):
    result = subprocess.run([str(built("CUSLICE_SCHEDULER_BIN")), "--ephemeral", "--socket", str(tmp_path / "s.sock"),
                             "--control-socket", str(tmp_path / inside)],
                            capture_output=True, text=True, timeout=DEADLINE)
    assert result.returncode == 2, result.stderr
    assert (f"the control socket {tmp_path / inside} is in the directory of the tenant socket "
            f"{tmp_path / 's.sock'} (or below it), which tenants are given") in result.stderr
    assert not (tmp_path / "s.sock").exists()


def test_a_control_directory_others_may_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # sticky, as /tmp: good enough for the tenant socket, not for this one
    result = subprocess.run([str(built("CUSLICE_SCHEDULER_BIN")), "--ephemeral", "--socket",
                             str(tmp_path / "tenant" / "s.sock"), "--control-socket", str(shared / "c.sock")],
                            capture_output=True, text=True, timeout=DEADLINE)
    assert result.returncode == 1, result.stderr
    assert f"{shared} may be written by other users" in result.stderr


def test_a_second_scheduler_on_the_same_control_socket_refuses_to_start(configured, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    second = subprocess.run([str(built("CUSLICE_SCHEDULER_BIN")), "--config", str(configured.config), "--socket",
                             str(other / "s.sock"), "--control-socket", str(configured.control_socket),
                             "--shm-name", configured.shm_name + "-x"],
                            capture_output=True, text=True, timeout=DEADLINE)
    assert second.returncode == 1
    assert (f"another scheduler (pid {configured.process.pid}) is already listening on "
            f"{configured.control_socket}") in second.stderr
    assert request("control", configured.control_socket, "describe") == "status 0"
