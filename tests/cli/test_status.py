"""`cuslice status`: a running daemon, processes that play hooked applications, and what
the tool reads back from the shared segment (table, JSON, --watch)."""
import json
import os
import pty
import select
import signal
import subprocess
import time

import pytest

from scheduler_harness import DEADLINE, FakeProcess, Scheduler, eventually

GiB = 1 << 30
CONFIG = """\
scheduler: {quantum: 10ms, lower_priority_timeslice: 150us}
tenants:
  - {name: train, allow_env: true, memory: 4GiB, compute: {share: 60%, limit: 80%}}
  - {name: serve, allow_env: true, priority: high, memory: 25%, compute: {share: 30%}}
"""


@pytest.fixture
def scheduler(tmp_path):
    s = Scheduler(tmp_path, config=CONFIG).wait_ready()
    yield s
    s.stop()


@pytest.fixture
def processes():
    started = []
    yield started
    for p in started:
        if p.process.poll() is None:
            p.close()


def status_json(run_cuslice, scheduler, *extra):
    result = run_cuslice("status", "--json", "--socket", scheduler.socket, *extra)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def gpu_row(run_cuslice, scheduler, tenant, gpu=0):
    """The tenant's row under the GPU, or {} while the GPU is not shown yet."""
    gpus = status_json(run_cuslice, scheduler)["gpus"]
    if len(gpus) <= gpu:
        return {}
    return {r["name"]: r for r in gpus[gpu]["tenants"]}[tenant]


def test_status_json_shows_each_tenant_on_each_gpu(run_cuslice, scheduler, processes):
    processes.append(FakeProcess(scheduler.socket, "train",
                                 "--reserve", GiB, "--gpu-time-ms", 300,
                                 "--over-quota", 8 * GiB, "--memory-total", 16 * GiB))
    processes.append(FakeProcess(scheduler.socket, "serve", "--hold"))
    # Blocked behind serve, which has the higher priority and never lets go.
    processes.append(FakeProcess(scheduler.socket, "train", "--reserve", GiB, "--wait"))
    waited = eventually(lambda: gpu_row(run_cuslice, scheduler, "train")["token_wait_seconds"],
                        "time waited to show")
    doc = status_json(run_cuslice, scheduler)

    assert doc["schema_version"] == 1
    daemon = doc["daemon"]
    assert daemon["reachable"] is True
    assert daemon["mode"] == "config"
    assert daemon["pid"] == scheduler.process.pid
    assert daemon["shm_name"] == scheduler.shm_name
    assert daemon["config_path"] == str(scheduler.config)
    assert daemon["quantum_seconds"] == pytest.approx(0.01)
    assert daemon["lower_priority_timeslice_seconds"] == pytest.approx(150e-6)

    tenants = {t["name"]: t for t in doc["tenants"]}
    assert tenants["train"]["pids"] == sorted([processes[0].pid, processes[2].pid])
    assert tenants["train"]["share"] == pytest.approx(0.6)
    assert tenants["train"]["limit"] == pytest.approx(0.8)
    assert tenants["train"]["memory_quota_bytes"] == 4 * GiB
    assert tenants["serve"]["priority"] == "high"
    assert tenants["serve"]["memory_quota_fraction"] == pytest.approx(0.25)
    assert tenants["serve"]["pids"] == [processes[1].pid]

    assert [g["index"] for g in doc["gpus"]] == [0]
    gpu = doc["gpus"][0]
    assert gpu["memory_total_bytes"] == 16 * GiB
    assert gpu["token_holder"] == "serve"
    assert gpu["token_handoffs"] >= 2
    rows = {r["name"]: r for r in gpu["tenants"]}
    train, serve = rows["train"], rows["serve"]
    assert train["memory_used_bytes"] == 2 * GiB
    assert train["memory_quota_bytes"] == 4 * GiB
    assert train["gpu_seconds"] == pytest.approx(0.3)
    assert train["token_wait_seconds"] >= waited > 0
    assert train["oom_refusals"] == 1
    assert train["token_grants"] >= 1
    assert 0.0 <= train["achieved_share"] <= 1.0
    assert serve["memory_quota_bytes"] == 4 * GiB  # 25% of the 16 GiB the hook reported
    assert serve["holds_token"] is True and train["holds_token"] is False


def test_share_achieved_is_published_by_the_daemon(run_cuslice, scheduler, processes):
    # 300 ms of GPU time reported at once: the next published share is above zero.
    processes.append(FakeProcess(scheduler.socket, "train", "--gpu-time-ms", 300))

    share = eventually(lambda: gpu_row(run_cuslice, scheduler, "train").get("achieved_share"),
                       "a published share")
    assert 0 < share <= 1.0


def test_a_process_that_leaves_is_no_longer_listed(run_cuslice, scheduler, processes):
    # GPU time keeps the GPU listed after the memory is given back.
    p = FakeProcess(scheduler.socket, "train", "--reserve", GiB, "--gpu-time-ms", 1)
    assert status_json(run_cuslice, scheduler)["tenants"][0]["pids"] == [p.pid]
    assert gpu_row(run_cuslice, scheduler, "train")["memory_used_bytes"] == GiB
    p.close()
    eventually(lambda: status_json(run_cuslice, scheduler)["tenants"][0]["pids"] == [], "the slot freed")
    assert gpu_row(run_cuslice, scheduler, "train")["memory_used_bytes"] == 0


def test_the_table_names_tenants_pids_and_the_token(run_cuslice, scheduler, processes):
    processes.append(FakeProcess(scheduler.socket, "serve", "--hold",
                                 "--reserve", GiB))
    result = run_cuslice("status", "--socket", scheduler.socket)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"pid {scheduler.process.pid}" in out
    assert "token: serve" in out
    assert str(processes[0].pid) in out
    assert "1.00 GiB / 25%" in out  # the card's size is unknown: the quota stays a share
    assert "train" in out


def test_the_segment_alone_is_enough_when_the_daemon_does_not_answer(run_cuslice, scheduler, processes):
    processes.append(FakeProcess(scheduler.socket, "train", "--reserve", GiB))
    # The segment holds what the daemon last published (it copies the tenants' usage a few
    # times a second, and when status asks): the reservation first, then the kill.
    eventually(lambda: gpu_row(run_cuslice, scheduler, "train").get("memory_used_bytes") == GiB,
               "the reservation to be published")
    scheduler.process.send_signal(signal.SIGKILL)  # leaves the segment behind, answers nothing
    scheduler.process.wait(timeout=DEADLINE)
    doc = status_json(run_cuslice, scheduler, "--shm-name", scheduler.shm_name)
    assert doc["daemon"]["reachable"] is False
    assert doc["gpus"][0]["tenants"][0]["memory_used_bytes"] == GiB


NO_SCHEDULER = 4  # protocol/exit_codes.h, docs/reference/cli.md


@pytest.mark.parametrize("flags", [[], ["--json"], ["--watch"], ["--json", "--watch"], ["--json", "--watch", "0.1"]])
def test_no_scheduler_is_reported_at_once_on_stderr(cuslice_bin, tmp_path, flags):
    # Not run_cuslice: a --watch that never ends must fail this test, not hang it.
    result = subprocess.run(
        [str(cuslice_bin), "status", *flags, "--socket", str(tmp_path / "none.sock")],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, capture_output=True, text=True,
        timeout=DEADLINE,
    )
    assert result.returncode == NO_SCHEDULER, result.stderr
    assert result.stdout == ""  # --json: valid JSON or nothing
    assert result.stderr.splitlines()[0] == f"cuslice status: no scheduler answers on {tmp_path / 'none.sock'}"
    assert "cuslice run" in result.stderr  # what to do


def test_a_segment_that_is_not_there_is_no_scheduler(run_cuslice, tmp_path):
    result = run_cuslice("status", "--json", "--socket", tmp_path / "none.sock", "--shm-name", "/cuslice-test-none")
    assert result.returncode == NO_SCHEDULER
    assert result.stdout == ""
    assert "there is no segment /cuslice-test-none" in result.stderr


def test_watch_json_prints_one_document_per_refresh(cuslice_bin, scheduler):
    watch = subprocess.Popen(
        [str(cuslice_bin), "status", "--json", "--watch", "0.1", "--socket", str(scheduler.socket)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    try:
        docs = []
        end = time.monotonic() + DEADLINE
        while len(docs) < 3 and time.monotonic() < end:
            if select.select([watch.stdout], [], [], 0.5)[0]:
                docs.append(json.loads(watch.stdout.readline()))
        assert len(docs) == 3
        assert all(d["daemon"]["pid"] == scheduler.process.pid for d in docs)
    finally:
        watch.terminate()
        watch.communicate(timeout=DEADLINE)


def read_frames(fd, count, marker):
    """Reads from `fd` until `count` occurrences of `marker` (or the deadline); the text."""
    out = b""
    end = time.monotonic() + DEADLINE
    while out.count(marker) < count and time.monotonic() < end:
        if select.select([fd], [], [], 0.5)[0]:
            try:
                out += os.read(fd, 65536)
            except OSError:  # the pty's other side closed
                break
    return out.decode(errors="replace")


def test_watch_on_a_terminal_redraws_the_table_in_place(cuslice_bin, scheduler, processes):
    processes.append(FakeProcess(scheduler.socket, "train", "--reserve", GiB, "--memory-total", 16 * GiB))
    primary, secondary = pty.openpty()
    watch = subprocess.Popen(
        [str(cuslice_bin), "status", "--watch", "0.1", "--socket", str(scheduler.socket)],
        stdout=secondary, stderr=subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    os.close(secondary)
    try:
        clear = "\x1b[H\x1b[2J"
        text = read_frames(primary, 3, clear.encode())
        frames = text.split(clear)
        # Each frame starts by homing the cursor and clearing the screen, then the full table.
        assert frames[0] == "" and len(frames) >= 4, repr(text)
        for frame in frames[1:3]:
            assert "cuslice-scheduler running" in frame, repr(frame)
            assert "TENANT" in frame and "train" in frame and "serve" in frame, repr(frame)
            assert "1.00 GiB / 4.00 GiB" in frame, repr(frame)
    finally:
        watch.terminate()
        watch.communicate(timeout=DEADLINE)
        os.close(primary)


def test_watch_keeps_going_while_the_scheduler_is_away(cuslice_bin, tmp_path):
    first = Scheduler(tmp_path, config=CONFIG).wait_ready()
    watch = subprocess.Popen(
        [str(cuslice_bin), "status", "--watch", "0.1", "--socket", str(first.socket)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    fd = watch.stdout.fileno()
    second = None
    try:
        # Piped, the table is not redrawn: frames follow each other.
        assert "cuslice-scheduler running" in read_frames(fd, 2, b"cuslice-scheduler running")
        first.stop()
        # Errors go to stderr, never among the frames on stdout.
        gone = read_frames(watch.stderr.fileno(), 2, b"no scheduler answers")
        assert gone.count(f"cuslice status: no scheduler answers on {first.socket}") >= 2, gone
        assert watch.poll() is None, "the watch ended when the scheduler went away"
        second = Scheduler(tmp_path, config=CONFIG).wait_ready()
        back = read_frames(fd, 1, b"cuslice-scheduler running")
        assert f"pid {second.process.pid}" in back, back
    finally:
        watch.terminate()
        watch.communicate(timeout=DEADLINE)
        if second is not None:
            second.stop()


@pytest.mark.parametrize("interval", ["soon", "0", "0.01", "-1", "2days", "1e3", "inf"])
def test_watch_takes_an_optional_interval(run_cuslice, interval):
    result = run_cuslice("status", "--watch", interval)
    assert result.returncode == 2
    assert result.stderr.startswith(f'cuslice status: --watch: "{interval}"'), result.stderr
    assert result.stdout == ""


def test_watch_interval_may_be_a_duration(cuslice_bin, scheduler):
    watch = subprocess.Popen(
        [str(cuslice_bin), "status", "--json", "--watch", "100ms", "--socket", str(scheduler.socket)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    try:
        assert json.loads(watch.stdout.readline())["daemon"]["pid"] == scheduler.process.pid
        assert json.loads(watch.stdout.readline())["daemon"]["pid"] == scheduler.process.pid
    finally:
        watch.terminate()
        watch.communicate(timeout=DEADLINE)


@pytest.mark.parametrize("args, expected", [
    (["status", "--shm-name", "cuslice"], ['--shm-name: "cuslice"', "'/' followed by a file name"]),
    (["status", "--shm-name", "/a/b"], ['--shm-name: "/a/b"']),
    (["status", "--socket", ""], ["--socket: the socket path is empty"]),
    (["status", "--socket", "/tmp/"], ['--socket: "/tmp/" is a directory']),
    (["reload", "--socket", ""], ["--socket: the socket path is empty"]),
    (["reload", "--socket", "/" + "s" * 200], ["--socket", "at most 107"]),
    (["status", "--no-such-flag"], ["--no-such-flag"]),
])
def test_bad_flags_of_status_and_reload_are_usage_errors(run_cuslice, args, expected):
    result = run_cuslice(*args)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"cuslice {args[0]}: "), result.stderr
    for text in expected:
        assert text in result.stderr
    assert result.stdout == ""
