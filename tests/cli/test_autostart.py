"""`cuslice run` with no scheduler answering: it starts one (ephemeral), later runs add
their tenants to it, and it exits once the last of their commands has gone."""
import json
import os
import stat
import subprocess

import pytest

from scheduler_harness import (DEADLINE, FakeProcess, Scheduler, built, default_control_socket, eventually,
                               shm_exists)

# A command that prints its pid, then its environment: its own tenant is `sh-<pid>`.
REPORT = ("sh", "-c", 'echo "pid=$$"; exec env')


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


def tenants_of(run_cuslice, socket_path):
    return {t["name"]: t for t in status(run_cuslice, socket_path)["tenants"]}


def reported(result):
    """The pid and the environment that REPORT printed."""
    assert result.returncode == 0, result.stderr
    env = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    return int(env.pop("pid")), env


def own_tenant(pid):
    """The tenant `run` makes for a fake process it runs without --tenant."""
    return f"{built('CUSLICE_FAKE_PROCESS').name}-{pid}"


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
    # `run` added the tenant on the control socket, beside the socket's directory.
    control = default_control_socket(socket_path)
    assert stat.S_ISSOCK(control.stat().st_mode) and stat.S_IMODE(control.stat().st_mode) == 0o600

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
    assert not socket_path.exists() and not control.exists()
    assert not shm_exists(shm_name)


def test_a_scheduler_whose_control_socket_is_elsewhere_is_told_where(run_cuslice, hook, tmp_path):
    control = tmp_path / "private" / "control.sock"
    s = Scheduler(tmp_path / "shared", args=("--ephemeral", "--control-socket", control)).wait_ready()
    try:
        lost = run_cuslice("run", "--hook", hook, "--socket", s.socket, "--", "true")
        assert lost.returncode == 1
        assert (f"the scheduler at {s.socket} takes tenants on its control socket, and no scheduler answers on "
                f"{default_control_socket(s.socket)}") in lost.stderr
        assert "--control-socket PATH" in lost.stderr
        added = set()
        for how in ({"flags": ("--control-socket", control), "env": {}},
                    {"flags": (), "env": {"CUSLICE_CONTROL_SOCKET": str(control)}}):
            result = run_cuslice("run", "--hook", hook, "--socket", s.socket, *how["flags"], "--", *REPORT,
                                 env=how["env"])
            pid, env = reported(result)
            assert env["CUSLICE_TENANT"] == f"sh-{pid}" and env["CUSLICE_SOCKET"] == str(s.socket)
            assert env["CUSLICE_CONTROL_SOCKET"] == str(control)
            added.add(env["CUSLICE_TENANT"])
        assert set(tenants_of(run_cuslice, s.socket)) <= added
    finally:
        s.stop()


def test_a_run_whose_command_ends_at_once_still_leaves_no_scheduler(run_cuslice, hook, socket_path):
    result = run_cuslice("run", "--hook", hook, "--socket", socket_path, "--", *REPORT,
                         env={"CUSLICE_AUTO_START": "1"})
    pid, env = reported(result)
    assert env["CUSLICE_TENANT"] == f"sh-{pid}"
    assert env["CUSLICE_SOCKET"] == str(socket_path)
    eventually(lambda: not socket_path.exists(), "the scheduler to exit")


@pytest.mark.parametrize("kernel", ["with close_range", "older than 5.9"])
def test_the_auto_started_scheduler_inherits_no_descriptor(run_cuslice, cuslice_bin, hook, socket_path, kernel):
    # A descriptor of whoever ran `cuslice run` (here a pipe) must not live on in a scheduler
    # that may outlive them, whether or not the kernel has close_range.
    read_end, write_end = os.pipe()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CUSLICE_AUTO_START": "1"}
    if kernel == "older than 5.9":
        env["LD_PRELOAD"] = str(built("CUSLICE_TEST_NO_CLOSE_RANGE"))
    run = subprocess.Popen([str(a) for a in run_prefix(cuslice_bin, hook, socket_path)] + ["sleep", "3"],
                           env=env, pass_fds=(write_end,))
    try:
        def daemon_pid():
            answer = run_cuslice("status", "--json", "--socket", socket_path)
            return answer.returncode == 0 and json.loads(answer.stdout)["daemon"]["pid"]

        daemon = eventually(daemon_pid, "the scheduler to start")
        pipe = os.readlink(f"/proc/self/fd/{write_end}")
        held = [os.readlink(f"/proc/{daemon}/fd/{fd}") for fd in os.listdir(f"/proc/{daemon}/fd")]
        assert pipe not in held, held
    finally:
        run.wait(timeout=DEADLINE)
        os.close(read_end)
        os.close(write_end)


def test_overlapping_runs_without_a_tenant_each_get_their_own(run_cuslice, cuslice_bin, hook, socket_path):
    """Two commands with other quotas, neither naming a tenant, run side by side."""
    first = FakeProcess(socket_path, None, "--reserve", 1 << 20, env={"CUSLICE_TENANT": ""},
                        command_prefix=run_prefix(cuslice_bin, hook, socket_path, "--memory", "4GiB"))
    try:
        second = FakeProcess(socket_path, None, env={"CUSLICE_TENANT": ""},
                             command_prefix=run_prefix(cuslice_bin, hook, socket_path, "--memory", "8GiB",
                                                       "--share", "50%", "--priority", "high"))
        try:
            tenants = tenants_of(run_cuslice, socket_path)
            mine, theirs = tenants[own_tenant(first.pid)], tenants[own_tenant(second.pid)]
            assert mine["pids"] == [first.pid] and theirs["pids"] == [second.pid]
            assert mine["memory_quota_bytes"] == 4 << 30 and theirs["memory_quota_bytes"] == 8 << 30
            assert theirs["share"] == pytest.approx(0.5) and theirs["priority"] == "high"
            assert mine["priority"] == "normal"
        finally:
            second.close()
    finally:
        first.close()


def test_runs_that_name_a_tenant_share_it(run_cuslice, cuslice_bin, hook, socket_path):
    flags = ("--tenant", "team", "--memory", "2GiB", "--share", "40%")
    first = FakeProcess(socket_path, None, env={"CUSLICE_TENANT": ""},
                        command_prefix=run_prefix(cuslice_bin, hook, socket_path, *flags))
    try:
        second = FakeProcess(socket_path, None, env={"CUSLICE_TENANT": ""},
                             command_prefix=run_prefix(cuslice_bin, hook, socket_path, *flags))
        try:
            tenants = tenants_of(run_cuslice, socket_path)
            assert list(tenants) == ["team"]
            assert sorted(tenants["team"]["pids"]) == sorted([first.pid, second.pid])
        finally:
            second.close()
        # A command's own tenant is joined the same way: by its name, with its flags.
        solo = FakeProcess(socket_path, None, env={"CUSLICE_TENANT": ""},
                           command_prefix=run_prefix(cuslice_bin, hook, socket_path, *flags[2:]))
        try:
            joiner = run_prefix(cuslice_bin, hook, socket_path, "--tenant", own_tenant(solo.pid), *flags[2:])
            _, env = reported(run_cuslice(*joiner[1:], *REPORT, env={"CUSLICE_AUTO_START": "1"}))
            assert env["CUSLICE_TENANT"] == own_tenant(solo.pid)
        finally:
            solo.close()
    finally:
        first.close()


def test_runs_one_after_another_with_other_quotas_do_not_clash(run_cuslice, cuslice_bin, hook, socket_path):
    """A run finds the scheduler the one before it used still there (it exits 2 s after its last
    client; here a third command keeps it): each still gets a tenant of its own."""
    keeper = FakeProcess(socket_path, None, env={"CUSLICE_TENANT": ""},
                         command_prefix=run_prefix(cuslice_bin, hook, socket_path, "--tenant", "keeper"))
    try:
        daemon_pid = status(run_cuslice, socket_path)["daemon"]["pid"]
        for memory in ("4GiB", "8GiB", "1GiB"):
            pid, env = reported(run_cuslice(*run_prefix(cuslice_bin, hook, socket_path, "--memory", memory)[1:],
                                            *REPORT, env={"CUSLICE_AUTO_START": "1"}))
            assert env["CUSLICE_TENANT"] == f"sh-{pid}" and env["CUSLICE_MEMORY_LIMIT"] == memory
        assert status(run_cuslice, socket_path)["daemon"]["pid"] == daemon_pid
    finally:
        keeper.close()


def test_a_runs_own_tenant_goes_with_its_command(run_cuslice, cuslice_bin, hook, socket_path):
    keeper = FakeProcess(socket_path, None, env={"CUSLICE_TENANT": ""},
                         command_prefix=run_prefix(cuslice_bin, hook, socket_path, "--tenant", "keeper"))
    try:
        share = run_prefix(cuslice_bin, hook, socket_path, "--share", "60%")[1:]
        _, env = reported(run_cuslice(*share, *REPORT, env={"CUSLICE_AUTO_START": "1"}))
        eventually(lambda: env["CUSLICE_TENANT"] not in tenants_of(run_cuslice, socket_path),
                   "the tenant to go with its command", timeout=5)
        # Its share went with it: another 60% fits.
        result = run_cuslice(*share, "true", env={"CUSLICE_AUTO_START": "1"})
        assert result.returncode == 0, result.stderr
    finally:
        keeper.close()


CONFIGURED = """\
tenants:
  - {name: a, allow_env: true, priority: high, compute: {share: 60%, limit: 90%}}
  - {name: b, allow_env: true}
"""


@pytest.fixture
def configured(tmp_path):
    s = Scheduler(tmp_path, config=CONFIGURED).wait_ready()
    yield s
    s.stop()


def run_beside(run_cuslice, hook, scheduler, *flags, command=("env",)):
    return run_cuslice("run", "--hook", hook, "--socket", scheduler.socket, *flags, "--", *command,
                       env={"CUSLICE_AUTO_START": "1"})


@pytest.mark.parametrize("flags", [(), ("--tenant", "b"), ("--memory", "1GiB"), ("--tenant", "a", "--share", "60%"),
                                   ("--tenant", "a", "--share", "60%", "--limit", "90%", "--priority", "high"),
                                   ("--tenant", "b", "--share", "40%", "--priority", "normal")])
def test_a_scheduler_with_a_file_takes_flags_that_say_what_the_file_says(run_cuslice, hook, configured, flags):
    result = run_beside(run_cuslice, hook, configured, *flags)
    assert result.returncode == 0, result.stderr
    env = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert env["CUSLICE_SOCKET"] == str(configured.socket)
    # Without --tenant no tenant of its own: the file's match rules and default_tenant decide.
    assert env.get("CUSLICE_TENANT") == (flags[1] if flags[:1] == ("--tenant",) else None)
    assert [t["name"] for t in status(run_cuslice, configured.socket)["tenants"]] == ["a", "b"]


@pytest.mark.parametrize("flags, message, hint", [
    (("--share", "30%"),
     "the scheduler at {socket} uses {config}; tenants and their shares come from that file, so --share 30% "
     "cannot be applied",
     "drop --share, or use --tenant NAME to join one of its tenants (a, b)"),
    (("--priority", "low", "--limit", "50%"),
     "the scheduler at {socket} uses {config}; tenants and their shares come from that file, so --limit 50%, "
     "--priority low cannot be applied",
     "drop --limit and --priority, or use --tenant NAME to join one of its tenants (a, b)"),
    (("--tenant", "a", "--share", "30%"),
     "the scheduler at {socket} uses {config}, where tenant `a` has share 60% (asked: 30%)",
     "drop --share (the file decides), or change {config} and run `cuslice reload`"),
    (("--tenant", "a", "--priority", "low", "--limit", "90%"),
     "the scheduler at {socket} uses {config}, where tenant `a` has priority high (asked: low)",
     "drop --limit and --priority (the file decides), or change {config} and run `cuslice reload`"),
    (("--tenant", "zz",),
     "the scheduler at {socket} uses {config}, which has no tenant `zz` (its tenants: a, b)",
     "use --tenant with one of them, or add `zz` to {config} and run `cuslice reload`"),
])
def test_a_scheduler_with_a_file_refuses_flags_it_would_ignore(run_cuslice, hook, configured, tmp_path, flags,
                                                                 message, hint):
    marker = tmp_path / "ran"
    result = run_beside(run_cuslice, hook, configured, *flags, command=("touch", marker))
    assert result.returncode == 2, result.stderr
    where = {"socket": configured.socket, "config": configured.config}
    assert result.stderr.splitlines() == ["cuslice run: " + message.format(**where), "  " + hint.format(**where)]
    assert not marker.exists()
    assert [t["name"] for t in status(run_cuslice, configured.socket)["tenants"]] == ["a", "b"]


def test_a_scheduler_that_cannot_start_is_reported_with_its_log(run_cuslice, hook, socket_path):
    result = run_cuslice("run", "--hook", hook, "--socket", socket_path, "--", "true",
                         env={"CUSLICE_AUTO_START": "1", "CUSLICE_SCHEDULER_PATH": "/bin/false"})
    assert result.returncode == 1
    assert f"could not start /bin/false on {socket_path}: it exited with status 1" in result.stderr
    assert "logged nothing" in result.stderr
    assert f"its log is {socket_path}.log" in result.stderr
    assert "CUSLICE_AUTO_START=0" in result.stderr


def test_only_this_attempts_log_lines_are_shown(run_cuslice, hook, tmp_path):
    """Lines an earlier scheduler left in the log must not stand in for this start's cause."""
    socket_path = tmp_path / "sock"
    (tmp_path / "sock.log").write_text("an old line from another day\n")
    fake = tmp_path / "fake-scheduler"
    fake.write_text("#!/bin/sh\necho 'cannot bind: Address in use (this attempt)' >&2\nexit 3\n")
    fake.chmod(0o755)
    result = run_cuslice("run", "--hook", hook, "--socket", socket_path, "--", "true",
                         env={"CUSLICE_AUTO_START": "1", "CUSLICE_SCHEDULER_PATH": str(fake)})
    assert result.returncode == 1
    assert "it exited with status 3 (configuration invalid)" in result.stderr
    assert "cannot bind: Address in use (this attempt)" in result.stderr
    assert "an old line" not in result.stderr


def test_a_socket_directory_that_cannot_be_made_names_the_cause(run_cuslice, hook, tmp_path):
    (tmp_path / "file").write_text("")
    socket_path = tmp_path / "file" / "sub" / "cuslice.sock"
    result = run_cuslice("run", "--hook", hook, "--socket", socket_path, "--", "true", env={"CUSLICE_AUTO_START": "1"})
    assert result.returncode == 1
    assert f"no scheduler answers on {socket_path}, and one cannot be started there: cannot create" in result.stderr
    assert "--socket PATH" in result.stderr


def test_auto_start_can_be_turned_off(run_cuslice, hook, socket_path):
    result = run_cuslice("run", "--hook", hook, "--socket", socket_path, "--", "true",
                         env={"CUSLICE_AUTO_START": "0"})
    assert result.returncode == 0, result.stderr
    assert not socket_path.exists()
