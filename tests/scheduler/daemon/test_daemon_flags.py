"""What systemd sees of the daemon (READY, RELOADING, STOPPING, WATCHDOG pings through
NOTIFY_SOCKET) and its command-line contract (log targets, ephemeral mode)."""
import signal
import socket

import pytest

from scheduler_harness import DEADLINE, Scheduler, answers, eventually

CONFIG = "tenants:\n  - {name: a, allow_env: true}\n"


@pytest.fixture
def notify(tmp_path):
    """A stand-in for systemd's notification socket; returns (path, receive)."""
    path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(DEADLINE)

    def receive_until(wanted):
        seen = []
        while wanted not in seen:
            seen.extend(sock.recv(4096).decode().split("\n"))
        return seen

    yield path, receive_until
    sock.close()


def test_ready_watchdog_reloading_stopping(tmp_path, notify):
    path, receive_until = notify
    # 200 ms: the daemon pings every 100 ms.
    s = Scheduler(tmp_path, config=CONFIG,
                  env={"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "200000"}).wait_ready()
    try:
        receive_until("READY=1")
        receive_until("WATCHDOG=1")
        receive_until("WATCHDOG=1")  # periodic, not once
        s.process.send_signal(signal.SIGHUP)
        receive_until("RELOADING=1")
        receive_until("READY=1")
        s.process.send_signal(signal.SIGTERM)
        receive_until("STOPPING=1")
        assert s.process.wait(timeout=DEADLINE) == 0
    finally:
        s.stop()


def test_no_watchdog_pings_for_another_process(tmp_path, notify):
    path, receive_until = notify
    # WATCHDOG_PID names someone else: the variables were inherited, not meant for us.
    s = Scheduler(tmp_path, config=CONFIG, env={"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "200000",
                                                "WATCHDOG_PID": "1"}).wait_ready()
    try:
        s.process.send_signal(signal.SIGTERM)
        assert "WATCHDOG=1" not in receive_until("STOPPING=1")
    finally:
        s.stop()


def test_journald_target_is_accepted_and_keeps_stderr_quiet(tmp_path):
    s = Scheduler(tmp_path, config=CONFIG, args=("--log-target", "journald")).wait_ready()
    assert answers(s.socket)
    assert s.stop() == ""  # everything went to the journal (or nowhere, without one)


@pytest.mark.parametrize("args", [
    ("--log-target", "syslog"),
    ("--log-level", "loud"),
    ("--ephemeral", "--config", "x.yaml"),
    ("--exit-when-idle", "-1", "--ephemeral"),
    ("--metrics-port", "0", "--ephemeral"),
])
def test_bad_flags_are_usage_errors(tmp_path, args):
    s = Scheduler(tmp_path, args=args)
    assert s.process.wait(timeout=DEADLINE) != 0
    assert not answers(s.socket)
    s.stop()


def test_without_a_file_or_ephemeral_it_refuses_to_start(tmp_path):
    s = Scheduler(tmp_path)
    assert s.process.wait(timeout=DEADLINE) == 2
    assert "--ephemeral" in s.stop()


def test_ephemeral_exits_when_idle(tmp_path):
    s = Scheduler(tmp_path, args=("--ephemeral", "--exit-when-idle", "0.2")).wait_ready()
    # Before its first client it would wait 30 s; a client that connects and leaves (as
    # wait_ready's probe did, and this one does) starts the 0.2 s grace instead.
    assert answers(s.socket)
    assert s.process.wait(timeout=DEADLINE) == 0
    assert "idle for the grace period" in s.stop()


def test_watch_config_reloads_when_the_file_is_rewritten(tmp_path, notify):
    path, receive_until = notify
    s = Scheduler(tmp_path, config=CONFIG, args=("--watch-config",),
                  env={"NOTIFY_SOCKET": str(path)}).wait_ready()
    try:
        receive_until("READY=1")
        (tmp_path / "new.yaml").write_text("tenants:\n  - {name: a, allow_env: true}\n  - {name: b, allow_env: true}\n")
        (tmp_path / "new.yaml").rename(s.config)  # how editors and tools save
        receive_until("RELOADING=1")
        receive_until("READY=1")
    finally:
        err = s.stop()
    assert "reloaded" in err and ": 2 tenants" in err, err


def test_watch_config_follows_a_configmap_update(tmp_path, notify):
    """The kubelet's layout: cuslice.yaml -> ..data/cuslice.yaml, ..data -> a dated directory,
    updated by writing a new directory and renaming a new `..data` link over the old one."""
    path, receive_until = notify
    mount = tmp_path / "config"
    (mount / "..2026_01").mkdir(parents=True)
    (mount / "..2026_01" / "cuslice.yaml").write_text(CONFIG)
    (mount / "..data").symlink_to("..2026_01")
    (mount / "cuslice.yaml").symlink_to("..data/cuslice.yaml")
    s = Scheduler(tmp_path, args=("--config", str(mount / "cuslice.yaml"), "--watch-config"),
                  env={"NOTIFY_SOCKET": str(path)}).wait_ready()
    try:
        receive_until("READY=1")
        (mount / "..2026_02").mkdir()
        (mount / "..2026_02" / "cuslice.yaml").write_text("tenants:\n  - {name: a, allow_env: true}\n  - {name: b, allow_env: true}\n  - {name: c, allow_env: true}\n")
        (mount / "..data_tmp").symlink_to("..2026_02")
        (mount / "..data_tmp").rename(mount / "..data")
        receive_until("RELOADING=1")
        receive_until("READY=1")
    finally:
        err = s.stop()
    assert ": 3 tenants" in err, err


def test_watch_config_needs_a_file(tmp_path):
    s = Scheduler(tmp_path, args=("--ephemeral", "--watch-config"))
    assert s.process.wait(timeout=DEADLINE) != 0
    assert "--watch-config requires --config" in s.stop()
