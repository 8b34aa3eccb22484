"""Attacks on the scheduler's socket and metrics endpoint by an unprivileged local user who
is a tenant (uid 65534, tenant `intruder`), against a scheduler run by root with another
tenant (`victim`, root's processes, `allow_env: false`). Each attack must fail, and
afterwards the scheduler must still serve and the victim must be as it was: its status
line, its registered process, and a new process of it registering. (Attacks on the shared
memory: test_segment_attacks.py.)

The attacker is tests/scheduler/clients/socket_attacker.cpp, run through setpriv. These tests need
root (to start the scheduler as root and drop to another uid); they skip otherwise.
"""
import json
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from scheduler_harness import DEADLINE, FakeProcess, Scheduler, answers, built, eventually, free_port, shm_exists

NOBODY = 65534
CONFIG = """\
scheduler: {quantum: 10ms, gpu_memory: 16GiB}
tenants:
  - name: victim
    memory: 4GiB
    allow_env: false
    match: {uid: 0}
  - name: intruder
    memory: 1GiB
    match: {uid: 65534}
  - name: crowd
    memory: 1GiB
    allow_env: true
"""

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv to act as another user")


@pytest.fixture
def world_dir():
    """A directory the unprivileged user can reach but not write (the socket lives here)."""
    d = Path(tempfile.mkdtemp(prefix="cuslice-attacks-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(d.parent / f"{d.name}-control", ignore_errors=True)  # the control socket's


@pytest.fixture
def scheduler(world_dir):
    port = free_port()
    s = Scheduler(world_dir, args=("--metrics-port", str(port)), config=CONFIG).wait_ready()
    s.metrics_port = port
    yield s
    s.stop()


@pytest.fixture
def victim(scheduler):
    p = FakeProcess(scheduler.socket, None, "--memory-total", str(16 << 30), "--reserve", str(1 << 30))
    yield p
    p.close()


def as_nobody(*args, **kwargs):
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
            str(built("CUSLICE_SOCKET_ATTACKER")), *map(str, args)]


def attack(*args, timeout=DEADLINE * 2):
    result = subprocess.run(as_nobody(*args), capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def status_json(scheduler):
    result = subprocess.run([str(built("CUSLICE_BIN")), "status", "--json", "--socket", str(scheduler.socket)],
                            capture_output=True, text=True, timeout=DEADLINE)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def status(scheduler):
    return {t["name"]: t for t in status_json(scheduler)["tenants"]}


def memory_used(scheduler, tenant):
    """The tenant's usage on GPU 0, as `cuslice status` shows it."""
    gpus = status_json(scheduler)["gpus"]
    return next(row["memory_used_bytes"] for row in gpus[0]["tenants"] if row["name"] == tenant)


def assert_unaffected(scheduler, victim):
    """The scheduler serves, the victim is as configured and registered, and a new process
    of the victim's joins."""
    assert scheduler.process.poll() is None, scheduler.stop()
    v = status(scheduler)["victim"]
    assert v["memory_quota_bytes"] == 4 << 30
    assert v["priority"] == "normal"
    assert victim.pid in v["pids"]
    another = FakeProcess(scheduler.socket, None)
    assert another.pid in status(scheduler)["victim"]["pids"]
    another.close()


def test_a_tenant_cannot_join_a_tenant_whose_rules_it_does_not_meet(scheduler, victim):
    out = attack("register", scheduler.socket, "victim", 0)
    assert out.startswith("refused 1 ") and "allow_env: false" in out, out
    assert_unaffected(scheduler, victim)


def test_a_declared_charge_that_would_wrap_the_usage_is_refused(scheduler, victim):
    out = attack("register", scheduler.socket, "intruder", 2**64 - 1)
    assert out.startswith("refused 3 "), out
    assert memory_used(scheduler, "intruder") == 0
    assert memory_used(scheduler, "victim") == 1 << 30
    assert_unaffected(scheduler, victim)


def test_one_user_cannot_take_every_process_slot(scheduler, victim):
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, max(4096, resource.getrlimit(resource.RLIMIT_NOFILE)[1])))
    hog = subprocess.Popen(["prlimit", "--nofile=4096", *as_nobody("hold", scheduler.socket, "intruder", 300)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout.readline().strip() == "ok 256 refused 44"
        # Refused outright (a hook then fails CUDA's initialisation), not "full" (a hook would
        # then run ungated): the processes past the limit do not escape the scheduler.
        out = attack("register", scheduler.socket, "intruder", 0)
        assert out.startswith("refused 1 ") and "the most one user may have" in out, out
        assert_unaffected(scheduler, victim)
    finally:
        hog.stdin.close()
        hog.wait(timeout=DEADLINE)


def test_users_who_share_a_tenant_cannot_take_every_process_slot(scheduler, victim):
    # Four users, each within its own limit, all in one tenant: together they may not leave
    # another tenant's process without a slot (it would then be refused, or run unscheduled).
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, max(4096, resource.getrlimit(resource.RLIMIT_NOFILE)[1])))
    hogs = []
    try:
        held = 0
        for uid in (65531, 65532, 65533, NOBODY):
            hog = subprocess.Popen(["prlimit", "--nofile=4096", "setpriv", f"--reuid={uid}", f"--regid={uid}",
                                    "--clear-groups", "--", str(built("CUSLICE_SOCKET_ATTACKER")), "hold",
                                    str(scheduler.socket), "crowd", "256"],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            hogs.append(hog)
            assert select.select([hog.stdout], [], [], DEADLINE * 4)[0], f"uid {uid}'s registrations went unanswered"
            words = hog.stdout.readline().split()
            assert words[0] == "ok", words
            held += int(words[1])
        assert held == 256, f"one tenant holds {held} process slots"
        # Full for that tenant: its hooks are told "no room" and fail, rather than run.
        out = attack("register", scheduler.socket, "crowd", 0)
        assert out.startswith("refused 2 ") and "the most one tenant may have" in out, out
        assert_unaffected(scheduler, victim)
    finally:
        for hog in hogs:
            hog.stdin.close()
            hog.kill()
            hog.wait(timeout=DEADLINE)


def test_silent_connections_are_closed(scheduler, victim):
    assert attack("connections", scheduler.socket, 20) == "opened 20 closed 20"
    assert_unaffected(scheduler, victim)


def test_a_connection_flood_is_bounded_and_others_still_register(scheduler, victim):
    flood = subprocess.Popen(["prlimit", "--nofile=4096", *as_nobody("connections", scheduler.socket, 1000)],
                             stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    assert_unaffected(scheduler, victim)  # while the flood's connections are open
    out, _ = flood.communicate(timeout=DEADLINE * 2)
    # Past 512 a connection is closed at once; the rest when they have said nothing for 5 s.
    assert out.strip() == "opened 1000 closed 1000", out
    assert_unaffected(scheduler, victim)


def test_an_oversized_message_closes_that_connection_only(scheduler, victim):
    assert attack("oversized", scheduler.socket, "intruder") == "closed"
    assert_unaffected(scheduler, victim)


def test_slow_http_clients_do_not_make_metrics_unreachable(scheduler, victim):
    slow = []
    for _ in range(40):
        s = socket.create_connection(("127.0.0.1", scheduler.metrics_port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and never the end of the headers
        slow.append(s)
    try:
        url = f"http://127.0.0.1:{scheduler.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=3) as response:
            assert response.status == 200
            assert b'cuslice_tenant_share_ratio{tenant="victim"}' in response.read()
        assert_unaffected(scheduler, victim)
    finally:
        for s in slow:
            s.close()


def test_a_thousand_idle_http_connections_leave_metrics_answering(scheduler, victim):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 1100:
        pytest.skip("cannot open 1000 connections here")
    idle = [socket.create_connection(("127.0.0.1", scheduler.metrics_port)) for _ in range(1000)]
    try:
        url = f"http://127.0.0.1:{scheduler.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=3) as response:
            assert response.status == 200
        assert_unaffected(scheduler, victim)
    finally:
        for s in idle:
            s.close()


def test_metrics_listen_on_loopback_only_by_default(scheduler):
    addresses = subprocess.run(["ss", "-ltnH", f"sport = :{scheduler.metrics_port}"], capture_output=True, text=True)
    if addresses.returncode != 0:
        pytest.skip("ss is not available")
    local = [line.split()[3] for line in addresses.stdout.splitlines()]
    assert local == [f"127.0.0.1:{scheduler.metrics_port}"], addresses.stdout


def test_a_second_scheduler_refuses_to_start_and_names_the_first(scheduler, world_dir, tmp_path):
    first = scheduler.process.pid
    # The same segment on another socket.
    other = world_dir / "other"
    other.mkdir(mode=0o755)
    second = subprocess.run([str(built("CUSLICE_SCHEDULER_BIN")), "--config", str(scheduler.config), "--socket",
                             str(other / "s.sock"), "--shm-name", scheduler.shm_name],
                            capture_output=True, text=True, timeout=DEADLINE)
    assert second.returncode == 1
    assert f"another scheduler (pid {first}) serves the shared memory {scheduler.shm_name}" in second.stderr
    # The same socket with another segment.
    third = subprocess.run([str(built("CUSLICE_SCHEDULER_BIN")), "--config", str(scheduler.config), "--socket",
                            str(scheduler.socket), "--shm-name", scheduler.shm_name + "-x"],
                           capture_output=True, text=True, timeout=DEADLINE)
    assert third.returncode == 1
    assert f"another scheduler (pid {first}) is already listening on {scheduler.socket}" in third.stderr
    assert scheduler.process.poll() is None


def test_a_scheduler_killed_with_sigkill_is_replaced_at_once(world_dir):
    first = Scheduler(world_dir, config=CONFIG).wait_ready()
    first.process.kill()
    first.process.wait(timeout=DEADLINE)
    # Its socket file, lock files and segment are left behind; the locks died with it.
    again = subprocess.Popen([str(built("CUSLICE_SCHEDULER_BIN")), "--config", str(first.config), "--socket",
                              str(first.socket), "--shm-name", first.shm_name],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        eventually(lambda: answers(first.socket) or again.poll() is not None, "the new scheduler", timeout=5)
        assert again.poll() is None, again.communicate()[1]
        p = FakeProcess(first.socket, None)
        p.close()
    finally:
        again.terminate()
        again.communicate(timeout=DEADLINE)


# Run as the attacker: takes a read lock on every file it can open in the tenant socket's
# directory and on the segment, each in a thread of its own that waits while the scheduler
# holds its lock, and says "locked PATH" for each it gets. Keeps them until stdin closes.
def process_state(pid):
    """Where a process is: its state and the kernel function it sleeps in."""
    try:
        with open(f"/proc/{pid}/status") as f:
            state = next((line.split(":", 1)[1].strip() for line in f if line.startswith("State:")), "?")
        with open(f"/proc/{pid}/wchan") as f:
            return f"{state}, in {f.read().strip() or '-'}"
    except OSError:
        return "gone"


LOCKER = r"""
import fcntl, os, sys, threading
said = threading.Lock()
def say(line):  # whole lines: print() from several threads can interleave its parts
    with said:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
def hold(path):
    try:
        fd = os.open(path, os.O_RDONLY)
        fcntl.lockf(fd, fcntl.LOCK_SH)
        say("locked " + path)
    except OSError:
        pass
paths = [os.path.join(sys.argv[1], n) for n in os.listdir(sys.argv[1])] + sys.argv[2:]
for p in paths:
    threading.Thread(target=hold, args=(p,), daemon=True).start()
say("waiting")
sys.stdin.read()
"""


def test_no_other_user_can_keep_a_restarted_scheduler_out(world_dir):
    first = Scheduler(world_dir, config=CONFIG).wait_ready()
    segment = "/dev/shm" + first.shm_name
    errors = world_dir.parent / f"{world_dir.name}-locker.err"
    with open(errors, "w") as err:
        locker = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
                                   sys.executable, "-c", LOCKER, str(world_dir), segment],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
    said = []
    threading.Thread(target=lambda: said.extend(line.strip() for line in locker.stdout), daemon=True).start()
    again = None
    try:
        # An attacker that could not start says why, at once, rather than after the wait. On a
        # loaded machine under a sanitizer its start has taken most of a minute: it gets two, and
        # where it is stuck is said if it never gets there.
        try:
            eventually(lambda: "waiting" in said or locker.poll() is not None, "the attacker to queue for its locks",
                       timeout=DEADLINE * 8)
        except AssertionError as e:
            raise AssertionError(f"{e}: it said {said}, is {process_state(locker.pid)}, "
                                 f"stderr: {errors.read_text()[-2000:]}") from None
        assert "waiting" in said, f"the attacker exited {locker.returncode}: {errors.read_text()[-2000:]}"
        first.process.kill()  # the segment stays behind, as after a crash
        first.process.wait(timeout=DEADLINE)
        # The lock the attacker queued for on the segment is its own once the scheduler is gone.
        eventually(lambda: f"locked {segment}" in said, "the attacker's lock")
        again = subprocess.Popen([str(built("CUSLICE_SCHEDULER_BIN")), "--config", str(first.config), "--socket",
                                  str(first.socket), "--shm-name", first.shm_name],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        eventually(lambda: answers(first.socket) or again.poll() is not None, "the new scheduler")
        assert again.poll() is None, again.communicate()[1]
        p = FakeProcess(first.socket, None)
        p.close()
    finally:
        locker.stdin.close()
        locker.wait(timeout=DEADLINE)
        if again is not None:
            again.terminate()
            again.communicate(timeout=DEADLINE)
        if shm_exists(first.shm_name):
            os.unlink(segment)
        errors.unlink(missing_ok=True)


# Registers with the scheduler by hand as tenant argv[2], hands the connection to a child that
# keeps it (and never exits by itself), says "registered PID CHILD", and exits once a line
# comes on stdin.
HAND_OVER = r"""
import os, signal, socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(sys.argv[1])
s.send(struct.pack("<IHH64s16Q", 0x43534C43, 2, 200, sys.argv[2].encode(), *([0] * 16)))
s.recvmsg(4096, socket.CMSG_SPACE(8))
child = os.fork()
if child == 0:
    while True:
        signal.pause()
print("registered", os.getpid(), child, flush=True)
sys.stdin.readline()
"""


def spawn_at_pid(pid, argv, **popen):
    """`argv` started as process `pid` (the kernel's next pid set through ns_last_pid), or
    None when other processes keep taking it."""
    for _ in range(200):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        p = subprocess.Popen(argv, **popen)
        if p.pid == pid:
            return p
        p.kill()
        p.wait()
    return None


def test_a_pid_reused_after_its_process_left_is_not_taken_for_it(tmp_path):
    if not os.access("/proc/sys/kernel/ns_last_pid", os.W_OK):
        pytest.skip("cannot choose the next pid here")
    shown = tmp_path / "nvml-pids"
    shown.write_text("")
    port = free_port()
    config = "tenants:\n  - {name: strict, allow_env: true, memory: 1GiB, on_violation: kill}\n"
    sched = Scheduler(tmp_path, ["--metrics-port", str(port)], config=config, env={
        "LD_LIBRARY_PATH": str(built("CUSLICE_FAKE_DRIVER_DIR")), "FAKE_NVML_OTHER_PIDS_FILE": str(shown)}).wait_ready()
    leaver = subprocess.Popen([sys.executable, "-c", HAND_OVER, str(sched.socket), "strict"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    child = victim = None
    try:
        words = leaver.stdout.readline().split()
        assert words[0] == "registered", words
        gone, child = int(words[1]), int(words[2])
        eventually(lambda: status(sched)["strict"]["pids"] == [gone], "the registration")
        leaver.stdin.write("\n")
        leaver.stdin.flush()
        leaver.wait(timeout=DEADLINE)
        # Another user's GPU process, without the hook, takes the pid; the child still holds
        # the connection.
        victim = spawn_at_pid(gone, ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
                                     "sleep", "600"])
        if victim is None:
            pytest.skip(f"pid {gone} kept being taken by other processes")
        shown.write_text(f"{gone}:{2 << 30}\n")
        # Reported as a process in no tenant (from the watchdog's second reading on), never
        # killed as the tenant's.
        eventually(lambda: victim.poll() is not None or
                   sample_metric(scrape_metrics(port), "cuslice_gpu_unhooked_processes") == 1,
                   "the victim reported as unhooked")
        assert victim.poll() is None, "the watchdog killed another user's process that took a tenant's pid"
        assert status(sched)["strict"]["pids"] == [], "a registration outlived its process"
    finally:
        if victim is not None:
            victim.kill()
            victim.wait()
        if child is not None:
            os.kill(child, 9)
        leaver.kill()
        leaver.wait()
        sched.stop()


def scrape_metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def sample_metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


# Connects without registering, hands the connection to a child and exits; the child sends
# the registration (tenant argv[2]) once a line comes on stdin, and says "answered" or
# "closed".
LATE_REGISTRATION = r"""
import os, socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(sys.argv[1])
if os.fork() != 0:
    print("connected", os.getpid(), flush=True)
    os._exit(0)
sys.stdin.readline()
try:
    s.send(struct.pack("<IHH64s16Q", 0x43534C43, 2, 200, sys.argv[2].encode(), *([0] * 16)))
    reply = s.recv(4096)
except OSError:
    reply = b""
print("answered" if reply else "closed", flush=True)
sys.stdin.readline()
"""


def test_a_registration_sent_after_the_connecting_process_left_is_not_taken(scheduler, victim):
    # What /proc says about a pid when a late message arrives may be another process's (the
    # pid reused, in another cgroup): the connection is judged by the process that connected,
    # and goes with it.
    late = subprocess.Popen([sys.executable, "-c", LATE_REGISTRATION, str(scheduler.socket), "crowd"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        words = late.stdout.readline().split()
        assert words[0] == "connected", words
        late.wait(timeout=DEADLINE)  # the process that connected; its child holds the socket
        late.stdin.write("\n")
        late.stdin.flush()
        assert select.select([late.stdout], [], [], DEADLINE)[0], "no word from the child"
        assert late.stdout.readline().strip() == "closed", "a registration outlived the process that connected"
        assert status(scheduler)["crowd"]["pids"] == []
        assert_unaffected(scheduler, victim)
    finally:
        late.stdin.close()  # the child reads it to its end, then exits
        late.wait()


def tenant_socket_full(path):
    """Whether the tenant socket's queue is full: the scheduler takes no connection now."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    probe.setblocking(False)
    try:
        probe.connect(str(path))
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        probe.close()


def test_users_together_cannot_take_the_descriptors_others_need(world_dir):
    # Nine users, each within its own 512 connections, against a scheduler with 3000
    # descriptors: the control socket must keep answering, and a process that starts then
    # must not run unscheduled (it registers, or its hook fails for want of room).
    s = Scheduler(world_dir, config=CONFIG, prefix=("prlimit", "--nofile=3000:3000")).wait_ready()
    floods = []
    try:
        for uid in range(65525, 65534):
            floods.append(subprocess.Popen(
                ["prlimit", "--nofile=4096", "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--",
                 str(built("CUSLICE_SOCKET_ATTACKER")), "connections", str(s.socket), "512"],
                stdout=subprocess.DEVNULL))
        eventually(lambda: tenant_socket_full(s.socket), "the tenant socket to take no more connections")
        asked = time.monotonic()
        out = subprocess.run([str(built("CUSLICE_SOCKET_ATTACKER")), "control", str(s.control_socket), "describe"],
                             capture_output=True, text=True, timeout=DEADLINE * 2).stdout
        assert out.startswith("status 0"), out
        assert time.monotonic() - asked < 3, "the control socket waited behind the tenant socket's connections"
        late = subprocess.run([str(built("CUSLICE_FAKE_PROCESS"))], input="", capture_output=True, text=True,
                              timeout=DEADLINE * 2,
                              env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CUSLICE_SOCKET": str(s.socket)})
        assert late.returncode == 0 or "no scheduler listening" not in late.stderr, late.stderr
    finally:
        for flood in floods:
            flood.kill()
            flood.wait()
        s.stop()


# A tenant matched by cgroup, and processes of uid nobody outside that cgroup that try to be
# taken for one inside it by pid games: a victim in the cgroup takes the pid of the process
# that connected, and the registration comes after, from a child the socket was handed to.
# The scheduler must judge the connection by the process that connected (nobody, outside).

def cgroup2_mount():
    """Where the cgroup v2 hierarchy is mounted (the unified one of a hybrid system too)."""
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            if len(fields) > 2 and fields[2] == "cgroup2":
                return Path(fields[1])
    return None


@pytest.fixture
def matched_cgroup():
    """A new cgroup v2 group that a tenant is matched by: its path as /proc/PID/cgroup shows
    it, and its directory. Skips where this machine gives none (no cgroup v2, or not writable:
    a container without its own cgroup namespace)."""
    mount = cgroup2_mount()
    if mount is None:
        pytest.skip("no cgroup v2 hierarchy mounted")
    own = Path("/proc/self/cgroup").read_text()
    if "0::/" not in own:
        pytest.skip("this process is in no cgroup v2 group")
    name = f"cuslice-test-{os.getpid()}-{time.monotonic_ns() % 1000000}"
    directory = mount / name
    try:
        directory.mkdir()
    except OSError as e:
        pytest.skip(f"cannot make a cgroup here: {e}")
    probe = subprocess.Popen(["sleep", "60"])
    try:
        (directory / "cgroup.procs").write_text(str(probe.pid))
        seen = cgroup_of(probe.pid)
    except OSError as e:
        seen = None
        why = f"cannot move a process into a cgroup here: {e}"
    finally:
        probe.kill()
        probe.wait()
    if seen is None:
        directory.rmdir()
        pytest.skip(why)
    yield seen, directory
    for _ in range(100):  # the group empties once its last process is reaped
        try:
            directory.rmdir()
            break
        except OSError:
            time.sleep(0.05)


def cgroup_config(path):
    return ("scheduler: {quantum: 10ms, gpu_memory: 16GiB}\n"
            "tenants:\n"
            f"  - {{name: pod, memory: 4GiB, match: {{cgroup: {path}}}}}\n")


def in_cgroup(directory):
    """A preexec_fn that puts the new process into the group before it execs."""
    def enter():
        with open(directory / "cgroup.procs", "w") as f:
            f.write(str(os.getpid()))
    return enter


# Run as nobody: connects to argv[1] and forks; says "connected PID CHILD" and exits once a
# line comes on stdin. The child keeps the connection; on SIGUSR1 it sends a registration
# that leaves the choice to the match rules and says "closed", or "status S MESSAGE" for the
# scheduler's answer, then waits to be killed.
CONNECT_AND_HAND_OVER = r"""
import os, signal, socket, struct, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(sys.argv[1])
child = os.fork()
if child != 0:
    print("connected", os.getpid(), child, flush=True)
    sys.stdin.readline()
    os._exit(0)
sys.stdin.close()
signal.sigwait({signal.SIGUSR1})
try:
    s.send(struct.pack("<IHH64s16Q", 0x43534C43, 2, 200, b"", *([0] * 16)))
    reply = s.recv(4096)
except OSError:
    reply = b""
if len(reply) >= 104 + 256:
    message = reply[104:104 + 256].split(b"\0")[0].decode(errors="replace")
    print("status", struct.unpack_from("<i", reply, 8)[0], message, flush=True)
else:
    print("closed", flush=True)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
signal.pause()
"""


def holds_pidfd_of(holder, pid):
    """Whether process `holder` holds a pidfd of process `pid`: the scheduler takes one when it
    accepts a connection."""
    for fd in os.listdir(f"/proc/{holder}/fdinfo"):
        try:
            info = Path(f"/proc/{holder}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        if any(line.split() == ["Pid:", str(pid)] for line in info.splitlines()):
            return True
    return False


def join_pod_from(directory, sched):
    """A process of the cgroup (root's) that registers by the match rules: the tenant is
    joined from inside the group, so that an attacker who got in would be seen beside it."""
    member = subprocess.Popen([str(built("CUSLICE_FAKE_PROCESS"))], preexec_fn=in_cgroup(directory),
                              env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CUSLICE_SOCKET": str(sched.socket)},
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert member.stdout.readline().strip() == "ready", member.stderr.read()
    assert status(sched)["pod"]["pids"] == [member.pid], "the cgroup's own process is not in its tenant"
    return member


def pid_games(sched, path, directory, before_accept):
    """Nobody connects and hands the socket to a child; the process that connected leaves and
    a victim in the cgroup takes its pid (before the scheduler accepts the connection, which
    is held back with SIGSTOP, or after); then the child registers. The child's words."""
    out = attack("register", sched.socket, "", 0)  # nobody itself, outside the cgroup
    assert out.startswith("refused 1 ") and "uid 65534" in out, out
    member = join_pod_from(directory, sched)
    attacker = victim = None
    child = None
    stopped = False
    try:
        if before_accept:
            sched.process.send_signal(signal.SIGSTOP)
            stopped = True
        attacker = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
                                     sys.executable, "-c", CONNECT_AND_HAND_OVER, str(sched.socket)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        words = attacker.stdout.readline().split()
        assert words[:1] == ["connected"], words
        gone, child = int(words[1]), int(words[2])
        if not before_accept:
            eventually(lambda: holds_pidfd_of(sched.process.pid, gone), "the scheduler to accept the connection")
        attacker.stdin.write("\n")
        attacker.stdin.flush()
        attacker.wait(timeout=DEADLINE)  # the process that connected, exited and reaped
        victim = spawn_at_pid(gone, ["sleep", "600"], preexec_fn=in_cgroup(directory))
        if victim is None:
            pytest.skip(f"pid {gone} kept being taken by other processes")
        assert cgroup_of(gone) == path, "the victim is not in the tenant's cgroup"
        if stopped:
            sched.process.send_signal(signal.SIGCONT)
            stopped = False
        os.kill(child, signal.SIGUSR1)
        assert select.select([attacker.stdout], [], [], DEADLINE)[0], "no word from the child"
        said = attacker.stdout.readline().strip()
        pids = status(sched)["pod"]["pids"]
        assert sched.process.poll() is None
        return said, pids, member.pid
    finally:
        if stopped:
            sched.process.send_signal(signal.SIGCONT)
        if child is not None:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if attacker is not None:
            attacker.kill()
            attacker.wait()
        if victim is not None:
            victim.kill()
            victim.wait()
        member.stdin.close()
        member.wait(timeout=DEADLINE)


def cgroup_of(pid):
    """The process's cgroup v2 group, as /proc shows it."""
    return next(line[3:] for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines() if line.startswith("0::"))


def assert_judged_as_nobody(said, pids, member):
    # Closed (the process that connected is gone), or refused as what it was: uid 65534,
    # outside the cgroup. Never accepted into the tenant as the victim that took its pid.
    assert said == "closed" or (said.startswith("status 1 ") and "uid 65534" in said), \
        f"nobody's connection was taken for the process that took its pid: {said}"
    assert pids == [member], f"tenant pod has {pids}"


@pytest.mark.parametrize("kernel", ["this kernel", "linux 6.5 to 6.17"])
def test_a_cgroup_tenant_is_not_joined_through_a_pid_taken_before_the_accept(world_dir, matched_cgroup, kernel):
    # The pid is reused between connect() and the accept: the scheduler must not read the
    # identity of whoever holds the pid at the accept. Linux 6.5 to 6.17 give no pidfd for a
    # peer already reaped (SO_PEERPIDFD fails) where 6.18 gives one of the dead process:
    # reaped_peer_pidfd.c makes this kernel answer as those do. (Before 6.5 there is no
    # SO_PEERPIDFD at all: docs/design/security.md, "What remains".)
    if not os.access("/proc/sys/kernel/ns_last_pid", os.W_OK):
        pytest.skip("cannot choose the next pid here")
    path, directory = matched_cgroup
    env = {}
    if kernel != "this kernel":
        env["LD_PRELOAD"] = ":".join(p for p in (os.environ.get("CUSLICE_TEST_PRELOAD", ""),
                                                 str(built("CUSLICE_REAPED_PEER_PIDFD"))) if p)
    sched = Scheduler(world_dir, config=cgroup_config(path), env=env).wait_ready()
    try:
        assert_judged_as_nobody(*pid_games(sched, path, directory, before_accept=True))
    finally:
        sched.stop()


def test_a_cgroup_tenant_is_not_joined_by_a_registration_sent_after_the_pid_was_taken(world_dir, matched_cgroup):
    # Accepted while the process that connected lived, registered after a victim in the
    # cgroup took its pid: what /proc says about that pid then is the victim's.
    if not os.access("/proc/sys/kernel/ns_last_pid", os.W_OK):
        pytest.skip("cannot choose the next pid here")
    path, directory = matched_cgroup
    sched = Scheduler(world_dir, config=cgroup_config(path)).wait_ready()
    try:
        assert_judged_as_nobody(*pid_games(sched, path, directory, before_accept=False))
    finally:
        sched.stop()
