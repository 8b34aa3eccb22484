"""Tenants side by side, end to end: cuslice-scheduler with a spatial GPU starts the MPS
control daemon (the fake driver's stand-in of nvidia-cuda-mps-control), the hook of a spatial
tenant's process connects its driver to it before cuInit with the tenant's SMs, MPS client
priority and memory limit, the tenants of the group hold the GPU's token together, a
time-sliced tenant alternates with them, the control daemon is started again when it ends and
stopped with the scheduler. memory_worker processes under libcuslice.so, on the fake driver.
"""
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "preemption"))
from preemption_harness import GiB, Scenario, wait_for  # noqa: E402

MPS_CONTROL = os.environ.get("FAKE_MPS_CONTROL", "")

CONFIG = f"""
scheduler:
  quantum: 20ms
  gpu_memory: 16GiB
  spatial:
    gpus: [0]
    mps_control: {MPS_CONTROL}
tenants:
  - {{name: serve, allow_env: true, gpus: [0], priority: high, memory: 4GiB, compute: {{sm: 50%}}}}
  - {{name: batch, allow_env: true, gpus: [0], priority: normal, memory: 2GiB, compute: {{sm: 25%}}}}
  - {{name: train, allow_env: true, gpus: [0], spatial: false, compute: {{share: 50%}}}}
"""


def mps_of(worker):
    """What the worker's driver connected to MPS with: (connected, percentage, priority,
    limit of ordinal 0 in bytes, pipe directory)."""
    words = worker.ok("mps")
    return int(words[2]), int(words[3]), int(words[4]), int(words[5]), words[6]


def pipe_directory(s):
    return os.path.join(s.workdir, "run", "mps")


def control_pid(s):
    with open(os.path.join(pipe_directory(s), "nvidia-cuda-mps-control.pid")) as f:
        return int(f.read().split()[0])


def test_a_spatial_tenant_joins_the_schedulers_mps_server_with_its_settings():
    with Scenario(CONFIG) as s:
        st = s.status()
        assert st["daemon"]["mps"]["state"] == "running", s.daemon.log_text()
        serve, batch, train = s.worker("serve"), s.worker("batch"), s.worker("train")
        connected, percent, priority, limit, pipe = mps_of(serve)
        assert (connected, percent, priority, pipe) == (1, 50, 0, pipe_directory(s))
        # The limit behind the hook's quota: the quota and the room a context takes.
        assert limit == 4 * GiB + 1 * GiB
        connected, percent, priority, limit, _ = mps_of(batch)
        assert (connected, percent, priority) == (1, 25, 1), "below the top priority of the group: MPS's low"
        assert limit == 3 * GiB
        assert mps_of(train)[0] == 0, "a time-sliced tenant's process stays out of MPS"
        # The quota still holds inside MPS, as the hook enforces it.
        assert serve.do(f"alloc {5 * GiB}")[:2] == ["err", "2"]
        serve.ok(f"alloc {3 * GiB}")
        gpu = s.status()["gpus"][0]
        assert gpu["mode"] == "spatial"
        rows = {t["name"]: t for t in gpu["tenants"]}
        assert rows["serve"]["spatial"] and rows["batch"]["spatial"] and not rows["train"]["spatial"]
        assert rows["serve"]["sm_fraction"] == 0.5 and rows["train"]["sm_fraction"] is None


def held_together(s, names):
    rows = {t["name"]: t for t in s.status()["gpus"][0]["tenants"]}
    return all(rows[n]["holds_token"] for n in names)


def test_the_spatial_group_holds_the_token_together_and_alternates_with_a_time_sliced_tenant():
    with Scenario(CONFIG) as s:
        serve, batch, train = s.worker("serve"), s.worker("batch"), s.worker("train")
        for w in (serve, batch, train):
            w.send("spin 8000")
        # Both spatial tenants hold the GPU at once; the trainer holds it alone at other times.
        wait_for(lambda: held_together(s, ["serve", "batch"]), 8, "the spatial tenants to hold the token together")
        wait_for(lambda: held_together(s, ["train"]) and not held_together(s, ["serve"]), 8,
                 "the time-sliced tenant to get its turn")
        for w in (serve, batch, train):
            assert w.answer(timeout_s=60)[0] == "ok"
        log = s.daemon.log_text()
        assert "token -> the spatial group" in log and "token -> train" in log, log


def test_the_mps_control_daemon_is_started_again_when_it_ends_and_stopped_with_the_scheduler():
    with Scenario(CONFIG) as s:
        first = control_pid(s)
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: s.status()["daemon"]["mps"]["starts"] == 2 and s.status()["daemon"]["mps"]["state"] == "running",
                 20, "the scheduler to start the MPS control daemon again")
        assert control_pid(s) != first
        # A process started now finds it.
        assert mps_of(s.worker("serve"))[0] == 1
        second = control_pid(s)
        s.daemon.stop()
        wait_for(lambda: not os.path.exists(f"/proc/{second}"), 10, "the control daemon to stop with the scheduler")
        assert not os.path.exists(os.path.join(pipe_directory(s), "control"))
        s.daemon.start()  # for the scenario's own stop


def test_without_its_control_program_spatial_tenants_time_slice_and_still_run():
    config = CONFIG.replace(MPS_CONTROL, "/nonexistent/nvidia-cuda-mps-control")
    with Scenario(config) as s:
        assert s.status()["daemon"]["mps"]["state"] == "failed"
        assert "cannot start /nonexistent/nvidia-cuda-mps-control" in s.daemon.log_text()
        serve = s.worker("serve")
        assert mps_of(serve)[0] == 0
        serve.ok("launch")


def test_a_process_that_brings_its_own_mps_server_runs_side_by_side():
    config = "scheduler: {quantum: 20ms}\ntenants:\n  - {name: batch, allow_env: true, memory: 2GiB}\n"
    with Scenario(config) as s:
        import subprocess
        own = os.path.join(s.workdir, "own-mps")
        os.makedirs(own)
        env = {"CUDA_MPS_PIPE_DIRECTORY": own, "CUDA_MPS_LOG_DIRECTORY": own}
        control = subprocess.Popen([MPS_CONTROL, "-f"], env={**os.environ, **env})
        try:
            wait_for(lambda: os.path.exists(os.path.join(own, "control")), 10, "the application's MPS daemon")
            batch = s.worker("batch", env=env)
            assert mps_of(batch)[:1] == (1,) and mps_of(batch)[4] == own
            wait_for(lambda: {t["name"]: t for t in s.status()["gpus"][0]["tenants"]}["batch"]["spatial"], 10,
                     "the tenant to run side by side")
            assert "runs in an MPS server of its own" in s.daemon.log_text()
        finally:
            control.send_signal(signal.SIGTERM)
            control.wait(timeout=10)


def test_a_reload_keeps_the_spatial_gpus_the_control_daemon_serves():
    with Scenario(CONFIG) as s:
        s.daemon.config.write_text(CONFIG.replace("gpus: [0]\n    mps_control", "gpus: all\n    mps_control"))
        s.daemon.process.send_signal(signal.SIGHUP)
        wait_for(lambda: "scheduler.spatial changed: it takes effect when the scheduler restarts" in s.daemon.log_text(),
                 10, "the reload's warning")
        assert s.status()["gpus"][0]["mode"] == "spatial"
        assert mps_of(s.worker("serve"))[0] == 1, "the running configuration's spatial GPUs stay"
