"""One table of exit statuses (protocol/exit_codes.h): what `cuslice --help` prints, what
docs/reference/cli.md says, and what cuslice-scheduler returns."""
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from scheduler_harness import DEADLINE, Scheduler

SOURCE = Path(os.environ.get("CUSLICE_SOURCE_DIR", Path(__file__).resolve().parents[2]))


def header_codes():
    """{name: number} from protocol/exit_codes.h's enum."""
    text = (SOURCE / "protocol" / "exit_codes.h").read_text()
    enum = text[text.index("enum class ExitCode"):text.index("};")]
    return {name: int(number) for name, number in re.findall(r"\bk(\w+) = (\d+),", enum)}


def help_table(run_cuslice):
    """{number: meaning} from the footer of `cuslice --help`."""
    result = run_cuslice("--help")
    assert result.returncode == 0
    footer = result.stdout[result.stdout.index("Exit status:"):]
    return {int(n): meaning for n, meaning in re.findall(r"^  (\d+) +(.+)$", footer, re.M)}


def docs_table():
    """{number: meaning} from the exit status table of docs/reference/cli.md."""
    text = (SOURCE / "docs" / "reference" / "cli.md").read_text()
    return {int(n): meaning.strip() for n, meaning in re.findall(r"^\| (\d+) +\| (.+?) *\|$", text, re.M)}


def test_help_docs_and_header_list_the_same_statuses(run_cuslice):
    codes = header_codes()
    assert codes == {"Ok": 0, "Failure": 1, "Usage": 2, "ConfigInvalid": 3, "NoScheduler": 4,
                     "CannotExecute": 126, "NotFound": 127}
    help = help_table(run_cuslice)
    assert sorted(help) == sorted(codes.values())
    assert docs_table() == help


def scheduler_exit(tmp_path, *args, config=None):
    s = Scheduler(tmp_path, args=args, config=config)
    code = s.process.wait(timeout=DEADLINE)
    return code, s.stop()


def test_scheduler_with_a_bad_config_exits_config_invalid(tmp_path):
    code, err = scheduler_exit(tmp_path, config="tenants:\n  - {name: a, memory: 4 furlongs}\n")
    assert code == 3
    assert re.search(r"cuslice.yaml:2:\d+: bad size `4 furlongs` for `memory`: unknown unit", err), err
    assert "not started" in err


def test_scheduler_with_an_unreadable_config_exits_config_invalid(tmp_path):
    code, err = scheduler_exit(tmp_path, "--config", tmp_path / "missing.yaml")
    assert code == 3
    assert "missing.yaml: cannot read the file" in err


def test_cli_and_scheduler_agree_on_a_bad_config(run_cuslice, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("scheduler: {quantum: 1e30s}\ntenants:\n  - {name: a}\n")
    check = run_cuslice("config", "check", bad)
    code, _ = scheduler_exit(tmp_path, "--config", bad)
    assert check.returncode == code == 3


@pytest.mark.parametrize("args", [("--bogus",), ("--log-level", "loud", "--ephemeral"), ("--metrics-port", "0"),
                                  ("--ephemeral", "--config", "x.yaml"), (),
                                  ("--ephemeral", "--exit-when-idle", "inf"),
                                  ("--ephemeral", "--exit-when-idle", "1e300"),
                                  ("--ephemeral", "--exit-when-idle", "0")])
def test_scheduler_bad_flags_exit_usage(tmp_path, args):
    code, err = scheduler_exit(tmp_path, *args)
    assert code == 2, err
    assert err  # the reason, on stderr


def test_scheduler_that_cannot_take_its_socket_exits_failure(tmp_path):
    first = Scheduler(tmp_path, args=("--ephemeral",)).wait_ready()
    try:
        code, err = scheduler_exit(tmp_path, "--ephemeral")  # the same socket
        assert code == 1
        assert "already listening" in err
    finally:
        first.stop()


def test_scheduler_stopped_cleanly_exits_ok(tmp_path):
    s = Scheduler(tmp_path, args=("--ephemeral",)).wait_ready()
    s.process.send_signal(signal.SIGTERM)
    assert s.process.wait(timeout=DEADLINE) == 0
    s.stop()


def test_scheduler_idle_time_may_be_a_duration(tmp_path):
    s = Scheduler(tmp_path, args=("--ephemeral", "--exit-when-idle", "200ms")).wait_ready()
    assert s.process.wait(timeout=DEADLINE) == 0
    assert "idle for the grace period" in s.stop()
