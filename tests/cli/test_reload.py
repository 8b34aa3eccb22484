"""`cuslice reload`: the daemon re-reads its file and answers ok, or every error (exit 3)."""
import json

import pytest

from scheduler_harness import Scheduler

GOOD = "tenants:\n  - {name: a, allow_env: true}\n"


@pytest.fixture
def scheduler(tmp_path):
    s = Scheduler(tmp_path, config=GOOD).wait_ready()
    yield s
    s.stop()


def tenant_names(run_cuslice, scheduler):
    result = run_cuslice("status", "--json", "--socket", scheduler.socket)
    assert result.returncode == 0, result.stderr
    return [t["name"] for t in json.loads(result.stdout)["tenants"]]


def test_reload_applies_a_good_file(run_cuslice, scheduler):
    scheduler.config.write_text(GOOD + "  - {name: b, allow_env: true, compute: {share: 50%}}\n")
    result = run_cuslice("reload", "--socket", scheduler.socket)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"reloaded {scheduler.config}\n"
    assert tenant_names(run_cuslice, scheduler) == ["a", "b"]


def test_reload_of_a_bad_file_lists_every_error_and_keeps_the_running_tenants(run_cuslice, scheduler):
    scheduler.config.write_text("tenants:\n  - {name: a, priority: soon}\n  - {nme: b}\n")
    result = run_cuslice("reload", "--socket", scheduler.socket)
    assert result.returncode == 3
    assert result.stderr.splitlines() == [
        f"{scheduler.config}:2:25: bad priority `soon`: expected high, normal or low",
        f"{scheduler.config}:3:5: a tenant needs a `name`",
        f"{scheduler.config}:3:6: unknown key `nme` (expected one of: name, priority, memory, compute, match, allow_env, on_violation, preemptible, gpus, host_pool, spatial)",
        f"cuslice reload: {scheduler.config} has errors; the scheduler keeps its running configuration",
    ]
    assert tenant_names(run_cuslice, scheduler) == ["a"]
    assert scheduler.process.poll() is None


def test_reload_of_an_ephemeral_scheduler_is_refused(run_cuslice, tmp_path):
    s = Scheduler(tmp_path, args=("--ephemeral",)).wait_ready()
    try:
        result = run_cuslice("reload", "--socket", s.socket)
        assert result.returncode == 1
        assert "no file to reload" in result.stderr
    finally:
        s.stop()


def test_reload_without_a_scheduler_fails(run_cuslice, tmp_path):
    result = run_cuslice("reload", "--socket", tmp_path / "none.sock")
    assert result.returncode == 4  # no scheduler: protocol/exit_codes.h
    assert f"no scheduler answers on {tmp_path / 'none.sock'}" in result.stderr


def test_reload_goes_to_the_control_socket(run_cuslice, tmp_path):
    control = tmp_path / "private" / "control.sock"
    (tmp_path / "shared").mkdir()
    s = Scheduler(tmp_path / "shared", args=("--control-socket", control), config=GOOD).wait_ready()
    try:
        lost = run_cuslice("reload", "--socket", s.socket)
        assert lost.returncode == 1
        assert (f"the scheduler on {s.socket} does not answer on the control socket "
                f"{tmp_path / 'shared-control' / 's.sock'}") in lost.stderr
        assert "pass --control-socket PATH" in lost.stderr
        for flags, env in ((("--control-socket", control), {}), ((), {"CUSLICE_CONTROL_SOCKET": str(control)})):
            result = run_cuslice("reload", "--socket", s.socket, *flags, env=env)
            assert result.returncode == 0, result.stderr
            assert result.stdout == f"reloaded {s.config}\n"
    finally:
        s.stop()
