"""deploy/systemd/cuslice-scheduler.service: what the scheduler relies on, and systemd's verdict."""
import configparser
import shutil
import subprocess

import pytest


@pytest.fixture(scope="module")
def unit_path(deploy_dir):
    return deploy_dir / "systemd" / "cuslice-scheduler.service"


@pytest.fixture(scope="module")
def unit(unit_path):
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # systemd's keys are case-sensitive
    parser.read_string(unit_path.read_text())
    return parser


def test_the_unit_matches_how_the_scheduler_runs(unit):
    service = unit["Service"]
    assert service["Type"] == "notify"  # the scheduler calls sd_notify(READY=1)
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"  # SIGHUP reloads the config
    assert service["WatchdogSec"]
    # The socket's directory, /run/cuslice, and the control socket's, /run/cuslice-control: the
    # scheduler's default for the socket /run/cuslice/cuslice.sock (protocol/control_socket.h).
    assert service["RuntimeDirectory"].split() == ["cuslice", "cuslice-control"]
    assert service["RuntimeDirectoryPreserve"] == "yes"
    assert service["ExecStart"].split()[1:] == [
        "--config", "/etc/cuslice/cuslice.yaml", "--log-target", "journald"]
    # Where `cmake --install` with the default prefix puts it.
    assert service["ExecStart"].split()[0] == "/usr/local/bin/cuslice-scheduler"
    assert unit["Unit"]["ConditionPathExists"] == "/etc/cuslice/cuslice.yaml"
    # A bad configuration (3) or bad flags (2) do not get better by restarting.
    assert service["RestartPreventExitStatus"].split() == ["2", "3"]


def test_the_unit_is_hardened(unit):
    service = unit["Service"]
    assert service["NoNewPrivileges"] == "yes"
    assert service["ProtectSystem"] == "strict"
    # CAP_KILL alone: the usage watchdog's `on_violation: kill` signals other users' processes.
    assert service["CapabilityBoundingSet"] == "CAP_KILL"
    assert service["AmbientCapabilities"] == "CAP_KILL"
    assert "PrivateDevices" not in service  # the GPU's device nodes must stay visible


def test_systemd_analyze_verify_accepts_the_unit(unit_path, unit, tmp_path):
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed")
    system_units = next(
        (p for p in ("/usr/lib/systemd/system", "/lib/systemd/system") if shutil.os.path.isdir(p)),
        None,
    )
    if system_units is None:
        pytest.skip("no systemd units on this machine to verify against")
    # Verify inside a scratch root: the scheduler is not installed here, and verify checks that
    # ExecStart's program exists. The root holds systemd's own units (for the targets the unit
    # depends on), a stand-in scheduler at ExecStart's path, and /bin/kill for ExecReload.
    root = tmp_path / "root"
    shutil.copytree(system_units, root / "usr/lib/systemd/system", symlinks=True)
    program = root / unit["Service"]["ExecStart"].split()[0].lstrip("/")
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    (root / "bin").mkdir()
    shutil.copy(shutil.which("kill"), root / "bin" / "kill")
    (root / "etc/systemd/system").mkdir(parents=True)
    shutil.copy(unit_path, root / "etc/systemd/system" / unit_path.name)

    result = subprocess.run(
        ["systemd-analyze", "verify", f"--root={root}", unit_path.name],
        capture_output=True, text=True, timeout=60,
    )
    # verify exits 0 on some mistakes (an unknown key, a bad value) and only prints them.
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stderr
