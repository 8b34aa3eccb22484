"""`cuslice run` with no scheduler answering: it starts one (ephemeral), later runs add
their tenants to it, and it exits once the last of their commands has gone."""
import json
import os

import pytest

from scheduler_harness import DEADLINE, FakeProcess, Scheduler, eventually, shm_exists


@pytest.fixture
def socket_path(tmp_path):
    path = tmp_path / "run" / "cuslice.sock"  # the directory does not exist yet
    yield path
    # A failed test may leave the daemon behind; it exits by itself once idle.


def run_prefix(cuslice_bin, hook, socket_path, *flags):
    return (cuslice_bin, "run", "--hook", hook, "--socket", socket_path, *flags, "--")


def status(run_cuslice, socket_path):
    result = run_cuslice("status", "--json", "--socket", socket_path)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # Our child's zombie would still answer; the daemon is never our child (double fork).
    return False


def test_auto_started_scheduler_lifecycle(run_cuslice, cuslice_bin, hook, socket_path):
    first = FakeProcess(socket_path, None, "--reserve", 1 << 20, env={"CUSLICE_TENANT": ""},
                        command_prefix=run_prefix(cuslice_bin, hook, socket_path, "--tenant", "a",
                                                  "--share", "30%", "--memory", "1GiB"))
    doc = status(run_cuslice, socket_path)
    daemon_pid = doc["daemon"]["pid"]
    assert doc["daemon"]["mode"] == "ephemeral"
    assert doc["daemon"]["reachable"] is True
    tenants = {t["name"]: t for t in doc["tenants"]}
    # The command joined the tenant `run` created for it: CUSLICE_TENANT and CUSLICE_SOCKET
    # came from `run`, not from us.
    assert tenants["a"]["pids"] == [first.pid]
    assert tenants["a"]["share"] == pytest.approx(0.3)
    assert tenants["a"]["memory_quota_bytes"] == 1 << 30

    second = FakeProcess(socket_path, None, env={"CUSLICE_TENANT": ""},
                         command_prefix=run_prefix(cuslice_bin, hook, socket_path, "--tenant", "b",
                                                   "--priority", "high"))
    doc = status(run_cuslice, socket_path)
    assert doc["daemon"]["pid"] == daemon_pid  # the same daemon, not a second one
    tenants = {t["name"]: t for t in doc["tenants"]}
    assert tenants["b"]["pids"] == [second.pid]
    assert tenants["b"]["priority"] == "high"

    # Same name, other flags: refused before the command runs.
    clash = run_cuslice(*run_prefix(cuslice_bin, hook, socket_path, "--tenant", "a", "--share", "50%")[1:],
                        "true", env={"CUSLICE_AUTO_START": "1"})
    assert clash.returncode == 1
    assert "tenant `a` already runs with share 30% (asked: 50%)" in clash.stderr

    shm_name = doc["daemon"]["shm_name"]
    first.close()
    second.close()
    eventually(lambda: gone(daemon_pid), "the scheduler to exit after its last client")
    assert not socket_path.exists()
    assert not shm_exists(shm_name)


def test_a_run_whose_command_ends_at_once_still_leaves_no_scheduler(run_cuslice, hook, socket_path):
    result = run_cuslice("run", "--hook", hook, "--socket", socket_path, "--", "env",
                         env={"CUSLICE_AUTO_START": "1"})
    assert result.returncode == 0, result.stderr
    env = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert env["CUSLICE_TENANT"] == "default"
    assert env["CUSLICE_SOCKET"] == str(socket_path)
    eventually(lambda: not socket_path.exists(), "the scheduler to exit")


def test_a_scheduler_with_a_file_keeps_its_tenants(run_cuslice, hook, tmp_path):
    s = Scheduler(tmp_path, config="tenants:\n  - {name: a}\n").wait_ready()
    try:
        result = run_cuslice("run", "--hook", hook, "--socket", s.socket, "--tenant", "zz",
                             "--share", "10%", "--", "env", env={"CUSLICE_AUTO_START": "1"})
        assert result.returncode == 0, result.stderr
        assert "CUSLICE_TENANT=zz" in result.stdout.splitlines()
        assert [t["name"] for t in status(run_cuslice, s.socket)["tenants"]] == ["a"]
    finally:
        s.stop()


def test_a_scheduler_that_cannot_start_is_reported_with_its_log(run_cuslice, hook, socket_path):
    result = run_cuslice("run", "--hook", hook, "--socket", socket_path, "--", "true",
                         env={"CUSLICE_AUTO_START": "1", "CUSLICE_SCHEDULER_PATH": "/bin/false"})
    assert result.returncode == 1
    assert "could not start /bin/false" in result.stderr
    assert "CUSLICE_AUTO_START=0" in result.stderr


def test_auto_start_can_be_turned_off(run_cuslice, hook, socket_path):
    result = run_cuslice("run", "--hook", hook, "--socket", socket_path, "--", "true",
                         env={"CUSLICE_AUTO_START": "0"})
    assert result.returncode == 0, result.stderr
    assert not socket_path.exists()
