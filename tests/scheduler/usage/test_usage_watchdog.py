"""The usage watchdog: the daemon sets the driver's per-process memory (NVML; the fake NVML
here, told which processes to show through FAKE_NVML_OTHER_PIDS_FILE) against the registered
processes and their tenants' quotas. A GPU process that never registered (no hook) and a
tenant whose processes hold more than its quota are reported in the log, the metrics and
`cuslice status`-readable segment; `on_violation: kill` ends the offending process."""
import os
import subprocess
import urllib.request

from scheduler_harness import FakeProcess, Scheduler, built, eventually, free_port

MiB = 1 << 20
GiB = 1 << 30

CONFIG = """\
tenants:
  - {name: strict, allow_env: true, memory: 1GiB, on_violation: kill}
  - {name: lenient, allow_env: true, memory: 1GiB}
"""


def fake_nvml_dir():
    return str(built("CUSLICE_FAKE_DRIVER_DIR"))


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def sample(text, name, **labels):
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def start(tmp_path):
    shown = tmp_path / "nvml-pids"
    shown.write_text("")
    port = free_port()
    sched = Scheduler(tmp_path, ["--metrics-port", str(port)], config=CONFIG, env={
        "LD_LIBRARY_PATH": fake_nvml_dir(),
        "FAKE_NVML_OTHER_PIDS_FILE": str(shown),
    }).wait_ready()
    return sched, shown, port


def test_a_gpu_process_without_the_hook_is_reported(tmp_path):
    sched, shown, port = start(tmp_path)
    unhooked = subprocess.Popen(["sleep", "60"])
    try:
        # A registered process on the card, so that the card is in use and named.
        p = FakeProcess(sched.socket, "lenient", "--memory-total", 16 * GiB)
        shown.write_text(f"{unhooked.pid}:{3 * GiB}\n{p.pid}:{100 * MiB}\n")
        eventually(lambda: sample(scrape(port), "cuslice_gpu_unhooked_processes") == 1,
                   "the unhooked process in the metrics")
        assert sample(scrape(port), "cuslice_gpu_unhooked_memory_bytes") == 3 * GiB
        assert sample(scrape(port), "cuslice_tenant_over_quota_bytes", tenant="lenient") == 0
        assert unhooked.poll() is None, "a process in no tenant is reported, never killed"
        # Gone from the driver's list: no longer reported.
        shown.write_text(f"{p.pid}:{100 * MiB}\n")
        eventually(lambda: sample(scrape(port), "cuslice_gpu_unhooked_processes") == 0, "the report to clear")
        p.close()
    finally:
        unhooked.kill()
        unhooked.wait()
        err = sched.stop()
    assert f"pid {unhooked.pid} holds {3 * GiB} bytes on GPU 0 and is in no tenant" in err
    assert err.count(f"pid {unhooked.pid} holds") == 1, "logged once, when it begins"


def test_over_quota_is_reported_and_killed_only_where_the_tenant_says_kill(tmp_path):
    sched, shown, port = start(tmp_path)
    try:
        strict = FakeProcess(sched.socket, "strict", "--memory-total", 16 * GiB, "--reserve", 512 * MiB)
        lenient = FakeProcess(sched.socket, "lenient", "--memory-total", 16 * GiB, "--reserve", 512 * MiB)
        # Each hook charged 512 MiB; the driver shows each process holding 2 GiB.
        shown.write_text(f"{strict.pid}:{2 * GiB}\n{lenient.pid}:{2 * GiB}\n")
        eventually(lambda: strict.process.poll() is not None, "the strict tenant's process to be killed")
        assert strict.process.returncode == -9
        eventually(lambda: (sample(scrape(port), "cuslice_tenant_over_quota_bytes", tenant="lenient") or 0) > 0,
                   "the lenient tenant over its quota in the metrics")
        text = scrape(port)
        assert sample(text, "cuslice_tenant_over_quota_bytes", tenant="lenient") == 2 * GiB - GiB - 64 * MiB
        assert sample(text, "cuslice_tenant_watchdog_kills_total", tenant="strict") == 1
        assert sample(text, "cuslice_tenant_watchdog_kills_total", tenant="lenient") == 0
        assert lenient.process.poll() is None, "on_violation: report (the default) kills nothing"
        lenient.close()
    finally:
        err = sched.stop()
    assert "tenant strict holds" in err and "killed pid" in err
    assert "tenant lenient holds" in err


def test_without_nvml_the_daemon_runs_and_says_the_watchdog_is_off(tmp_path):
    sched = Scheduler(tmp_path, config=CONFIG, env={"LD_LIBRARY_PATH": str(tmp_path)}).wait_ready()
    err = sched.stop()
    assert "usage watchdog off: cannot load libnvidia-ml.so.1" in err



def test_when_nvml_cannot_start_the_daemon_runs_and_says_why(tmp_path):
    env = {"LD_LIBRARY_PATH": fake_nvml_dir(), "FAKE_NVML_INIT_ERROR": "9"}  # driver not loaded
    sched = Scheduler(tmp_path, config=CONFIG, env=env).wait_ready()
    err = sched.stop()
    assert "usage watchdog off: nvmlInit failed: Driver Not Loaded" in err



def test_a_tenant_reporting_a_tiny_card_does_not_get_another_tenant_killed(tmp_path):
    # `memory: 50%` of the fake card (16 GiB) is 8 GiB: the victim's 2 GiB is well within it.
    # A liar's hook says the card has 1 MiB, which would make 50% of it 512 KiB.
    shown = tmp_path / "nvml-pids"
    shown.write_text("")
    config = ("tenants:\n"
              "  - {name: liar, allow_env: true}\n"
              "  - {name: victim, allow_env: true, memory: 50%, on_violation: kill}\n")
    port = free_port()
    sched = Scheduler(tmp_path, ["--metrics-port", str(port)], config=config, env={
        "LD_LIBRARY_PATH": fake_nvml_dir(), "FAKE_NVML_OTHER_PIDS_FILE": str(shown)}).wait_ready()
    unhooked = subprocess.Popen(["sleep", "60"])
    try:
        liar = FakeProcess(sched.socket, "liar", "--memory-total", MiB)
        victim = FakeProcess(sched.socket, "victim", "--reserve", 2 * GiB)
        # Two readings of the driver with the victim in them, told apart by an unhooked
        # process that comes and goes.
        shown.write_text(f"{victim.pid}:{2 * GiB}\n{unhooked.pid}:{MiB}\n")
        eventually(lambda: sample(scrape(port), "cuslice_gpu_unhooked_processes") == 1, "a first reading")
        shown.write_text(f"{victim.pid}:{2 * GiB}\n")
        eventually(lambda: victim.process.poll() is not None or
                   sample(scrape(port), "cuslice_gpu_unhooked_processes") == 0, "a second reading")
        assert victim.process.poll() is None, "killed against the card's size as another tenant reported it"
        assert sample(scrape(port), "cuslice_tenant_over_quota_bytes", tenant="victim") == 0
        assert sample(scrape(port), "cuslice_gpu_memory_total_bytes") == 16 * GiB, "the daemon's own NVML"
        victim.close()
        liar.close()
    finally:
        unhooked.kill()
        unhooked.wait()
        sched.stop()
