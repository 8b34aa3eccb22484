"""cuslice-device-plugin end to end (device_plugin_harness.py): the fake kubelet drives the
real plugin, which sees the fake NVML's GPUs and makes tenants in the real cuslice-scheduler;
`cuslice status --json` and processes that register like the hook (fake_hooked_process)
check what the tenants are. Placement, the start check and the node's capacity are
test_device_plugin_placement.py's.

Waits are bounded polls that return as soon as the condition holds.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.environ.get("CUSLICE_HARNESS_DIR", ""))
from device_plugin_harness import (COMPUTE, MEMORY, GiB, gpu_of, make_node, tenant_env,  # noqa: E402,F401
                                   tenant_name)
from scheduler_harness import DEADLINE, FakeProcess, built, eventually  # noqa: E402


@pytest.mark.parametrize("gpus", [1, 3, 8])
def test_each_gpu_is_advertised_as_its_memory_in_gib_and_100_compute_ids(make_node, gpus):
    node = make_node(gpus=gpus, memory=24 * GiB)
    # Healthy: no more free GiB than the 64 tenants the scheduler holds (test_device_plugin_placement.py).
    memory = node.kubelet.ok("wait_devices", resource=MEMORY, total=24 * gpus, healthy=min(24 * gpus, 64))
    assert memory["total"] == 24 * gpus
    devices = node.kubelet.ok("devices", resource=MEMORY)["devices"]
    per_gpu = {}
    for device_id in devices:
        per_gpu[gpu_of(device_id)] = per_gpu.get(gpu_of(device_id), 0) + 1
    assert sorted(per_gpu.values()) == [24] * gpus
    node.kubelet.ok("wait_devices", resource=COMPUTE, total=100 * gpus, healthy=100 * gpus)


def test_preferred_allocation_puts_a_containers_memory_on_one_gpu_the_tightest_fit(make_node):
    node = make_node(gpus=3)
    a = node.kubelet.admit("a", memory=10)
    b = node.kubelet.admit("b", memory=10)
    c = node.kubelet.admit("c", memory=6)
    for pod in (a, b, c):
        assert pod["ok"], pod
        assert len({gpu_of(i) for i in pod["containers"]["main"][MEMORY]["ids"]}) == 1
    gpu = {name: tenant_env(pod)["CUSLICE_GPU_INDICES"] for name, pod in (("a", a), ("b", b), ("c", c))}
    assert gpu["a"] != gpu["b"]
    assert gpu["c"] == gpu["a"]  # the 6 GiB left beside a, not a fresh GPU


def test_allocate_gives_the_container_its_tenant_hook_socket_segment_and_gpu(make_node):
    node = make_node(gpus=2)
    pod = node.kubelet.admit("p", memory=8, compute=30)
    assert pod["ok"], pod
    memory = pod["containers"]["main"][MEMORY]
    env = memory["envs"]
    name, key = env["CUSLICE_TENANT"].split(":")
    assert name.startswith("k8s-") and len(key) >= 16
    gpu = int(env["CUSLICE_GPU_INDICES"])
    assert env["CUSLICE_MEMORY_LIMIT"] == str(8 * GiB)
    assert env["CUSLICE_SOCKET"] == "/run/cuslice/" + node.scheduler.socket.name
    assert env["NVIDIA_VISIBLE_DEVICES"] == gpu_of(memory["ids"][0])
    mounts = {m["container_path"]: m for m in memory["mounts"]}
    assert mounts["/opt/cuslice/lib/libcuslice.so"] == {
        "container_path": "/opt/cuslice/lib/libcuslice.so", "host_path": str(built("CUSLICE_HOOK_LIB")),
        "read_only": True}
    preload = mounts["/etc/ld.so.preload"]
    assert preload["read_only"]
    assert Path(preload["host_path"]).read_text() == "/opt/cuslice/lib/libcuslice.so\n"
    assert mounts["/run/cuslice"] == {"container_path": "/run/cuslice",
                                      "host_path": str(node.scheduler.socket.parent), "read_only": True}
    # The control socket, where the plugin made the tenant, is not given to the container.
    assert node.scheduler.control_socket.exists()
    assert not any(Path(m["host_path"]).is_relative_to(node.scheduler.control_socket.parent) for m in memory["mounts"])
    segment = "/dev/shm" + node.scheduler.shm_name
    assert mounts[segment] == {"container_path": segment, "host_path": segment, "read_only": True}
    devices = {d["container_path"]: d["host_path"] for d in memory["devices"]}
    assert devices == {f"/dev/{n}": str(node.dev / n)
                       for n in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", f"nvidia{gpu}")}
    compute = pod["containers"]["main"][COMPUTE]
    assert compute["envs"] == {"CUSLICE_COMPUTE_SHARE": "30%"}
    assert not compute["mounts"] and not compute["devices"]


def test_two_pods_get_tenants_with_exactly_their_quota_and_share(make_node):
    node = make_node(gpus=1)
    a = node.kubelet.admit("a", memory=8, compute=30, order=[COMPUTE, MEMORY])
    b = node.kubelet.admit("b", memory=4)
    assert a["ok"] and b["ok"], (a, b)
    ta, tb = tenant_name(a), tenant_name(b)

    def linked():
        t = node.tenants()
        return ta in t and tb in t and t[ta]["share"] == pytest.approx(0.30) and t[tb]["share"] == pytest.approx(0.70)
    eventually(linked, "both tenants with their shares")
    eventually(lambda: node.labels(tb).get("pod") == "b", "b's labels, from PodResources")
    tenants = node.tenants()
    assert tenants[ta]["memory_quota_bytes"] == 8 * GiB
    assert tenants[tb]["memory_quota_bytes"] == 4 * GiB
    assert tenants[ta]["limit"] == 1.0  # a share, not a cap
    assert node.labels(ta) == {"namespace": "team-a", "pod": "a", "container": "main"}
    assert node.labels(tb) == {"namespace": "team-a", "pod": "b", "container": "main"}
    assert tenants[ta]["workload"] == {"namespace": "team-a", "pod": "a", "container": "main"}

    # A process started with the container's environment joins its tenant and is held to it.
    env = {"CUSLICE_TENANT": tenant_env(a)["CUSLICE_TENANT"]}
    gpu = tenant_env(a)["CUSLICE_GPU_INDICES"]
    inside = FakeProcess(node.scheduler.socket, None, "--gpu", gpu, "--reserve", 7 * GiB,
                         "--over-quota", 2 * GiB, env=env)
    assert node.tenants()[ta]["pids"] == [inside.pid]
    inside.close()


def test_only_the_container_with_the_credential_joins_a_plugin_tenant(make_node):
    node = make_node(gpus=1)
    a = node.kubelet.admit("a", memory=2)
    assert a["ok"], a
    name = tenant_name(a)
    for tenant in (name, name + ":" + "0" * 32, "k8s-000000000000:" + "0" * 32):
        p = subprocess.run([str(built("CUSLICE_FAKE_PROCESS"))],
                           env={"CUSLICE_SOCKET": str(node.scheduler.socket), "CUSLICE_TENANT": tenant},
                           input="", capture_output=True, text=True, timeout=DEADLINE)
        assert p.returncode == 100, (tenant, p.stdout, p.stderr)
    assert node.tenants()[name]["pids"] == []


def test_a_request_no_single_gpu_can_hold_is_refused_naming_each_gpus_free_memory(make_node):
    node = make_node(gpus=2)
    assert node.kubelet.admit("small", memory=6)["ok"]
    refused = node.kubelet.admit("big", memory=20)
    assert not refused["ok"]
    error = refused["error"]
    assert "cuslice.io/gpu-memory: 20 GiB asked for" in error, error
    assert "10 GiB free of 16 GiB" in error and "16 GiB free of 16 GiB" in error, error
    assert len([t for t in node.tenants()]) == 1
    # The kubelet chose IDs on two GPUs even without the preferred allocation: the same answer.
    assert "20 GiB asked for" in node.kubelet.admit("big2", memory=20, pick="spread")["error"]


def test_a_deleted_pods_tenant_goes_and_its_memory_can_be_given_again(make_node):
    node = make_node(gpus=1)
    a = node.kubelet.admit("a", memory=12)
    assert a["ok"]
    name = tenant_name(a)
    eventually(lambda: node.labels(name).get("pod") == "a", "the plugin to see the pod")
    assert not node.kubelet.admit("b", memory=8)["ok"]  # 4 GiB left
    node.kubelet.ok("delete", namespace="team-a", pod="a")
    started = time.monotonic()
    eventually(lambda: name not in node.tenants(), "the tenant to go")
    print(f"tenant removed {time.monotonic() - started:.2f} s after the pod left PodResources")
    assert node.kubelet.admit("b", memory=16)["ok"]


def test_a_pod_that_never_shows_up_loses_its_tenant_after_the_grace(make_node):
    node = make_node(gpus=1)
    # The memory call succeeds, then the kubelet refuses the compute (more than there is): the
    # pod is rejected and never appears in PodResources.
    refused = node.kubelet.admit("x", memory=2, compute=101, order=[MEMORY, COMPUTE])
    assert not refused["ok"]
    eventually(lambda: any(t.startswith("k8s-") for t in node.tenants()), "the orphan tenant")
    eventually(lambda: not node.tenants(), "the orphan tenant to go")


def test_a_kubelet_restart_makes_the_plugin_register_again_and_keeps_tenants(make_node):
    node = make_node(gpus=2)
    a = node.kubelet.admit("a", memory=4, compute=20)
    assert a["ok"]
    name = tenant_name(a)
    eventually(lambda: name in node.tenants(), "the tenant")
    node.kubelet.ok("restart", down_ms=300)
    node.kubelet.ok("wait_registered", resource=MEMORY, count=2)
    node.kubelet.ok("wait_registered", resource=COMPUTE, count=2)
    node.kubelet.ok("wait_devices", resource=MEMORY, total=32, healthy=32)
    assert name in node.tenants()
    b = node.kubelet.admit("b", memory=4)
    assert b["ok"], b
    assert set(b["containers"]["main"][MEMORY]["ids"]).isdisjoint(a["containers"]["main"][MEMORY]["ids"])


def test_a_plugin_restart_takes_its_tenants_back_from_the_scheduler(make_node):
    node = make_node(gpus=1)
    a = node.kubelet.admit("a", memory=6, compute=40)
    b = node.kubelet.admit("b", memory=6)
    ta, tb = tenant_name(a), tenant_name(b)
    eventually(lambda: node.tenants().get(ta, {}).get("share") == pytest.approx(0.40), "a linked")
    node.stop_plugin(signal.SIGKILL)
    before = node.tenants()
    node.start_plugin()
    node.kubelet.ok("wait_registered", resource=MEMORY, count=2)
    after = node.tenants()
    assert set(after) == {ta, tb} and after[ta]["memory_quota_bytes"] == before[ta]["memory_quota_bytes"]
    assert after[ta]["share"] == pytest.approx(0.40)
    # It knows what is held: 4 GiB are left, not 16.
    assert not node.kubelet.admit("c", memory=5)["ok"]
    # And still cleans up.
    node.kubelet.ok("delete", namespace="team-a", pod="a")
    eventually(lambda: ta not in node.tenants(), "a's tenant to go")
    assert tb in node.tenants()


def test_a_scheduler_restart_marks_devices_unhealthy_then_gets_its_tenants_back(make_node):
    node = make_node(gpus=2)
    a = node.kubelet.admit("a", memory=3, compute=10)
    name = tenant_name(a)
    eventually(lambda: name in node.tenants(), "the tenant")
    node.scheduler.stop()
    node.kubelet.ok("wait_devices", resource=MEMORY, total=32, healthy=0)
    node.kubelet.ok("wait_devices", resource=COMPUTE, total=200, healthy=0)
    refused = node.kubelet.admit("b", memory=1)
    assert not refused["ok"]
    node.restart_scheduler()
    node.kubelet.ok("wait_devices", resource=MEMORY, total=32, healthy=32)
    eventually(lambda: node.tenants().get(name, {}).get("memory_quota_bytes") == 3 * GiB, "the tenant again")
    eventually(lambda: node.tenants()[name]["share"] == pytest.approx(0.10), "its share again")
    # The container's credential still works with the new scheduler.
    p = FakeProcess(node.scheduler.socket, None, "--gpu", tenant_env(a)["CUSLICE_GPU_INDICES"],
                    env={"CUSLICE_TENANT": tenant_env(a)["CUSLICE_TENANT"]})
    p.close()


def test_eight_gpus_each_container_on_its_own_gpu_and_all_cleaned_up(make_node):
    node = make_node(gpus=8)
    pods = {f"p{i}": node.kubelet.admit(f"p{i}", memory=12, compute=50) for i in range(8)}
    refused = {name: p for name, p in pods.items() if not p["ok"] or not p["containers"]["main"]["start"]["ok"]}
    assert not refused, f"{json.dumps(refused, indent=1)}\n{node.logs()}"
    gpus = {tenant_env(p)["CUSLICE_GPU_INDICES"] for p in pods.values()}
    assert gpus == {str(i) for i in range(8)}
    names = {tenant_name(p) for p in pods.values()}
    eventually(lambda: set(node.tenants()) == names, "eight tenants")
    assert all(t["memory_quota_bytes"] == 12 * GiB for t in node.tenants().values())
    # No GPU has 12 GiB left.
    assert not node.kubelet.admit("extra", memory=12)["ok"]
    assert node.kubelet.admit("small", memory=4)["ok"]
    for i in range(8):
        node.kubelet.ok("delete", namespace="team-a", pod=f"p{i}")
    eventually(lambda: len(node.tenants()) == 1, "only the small pod's tenant")


def test_a_configmap_tenants_quota_is_memory_the_plugin_does_not_hand_out(make_node, tmp_path):
    node = make_node(gpus=1)
    (tmp_path / "cuslice.yaml").write_text(
        "scheduler:\n  quantum: 50ms\ntenants:\n  - name: batch\n    allow_env: true\n    memory: 6GiB\n    match: {uid: 4242}\n")
    node.scheduler.process.send_signal(signal.SIGHUP)
    node.kubelet.ok("wait_devices", resource=MEMORY, total=10, healthy=10)
    assert not node.kubelet.admit("a", memory=11)["ok"]
    assert node.kubelet.admit("a", memory=10)["ok"]


def test_a_preemptible_configmap_tenant_keeps_no_memory_back(make_node, tmp_path):
    # Its memory is given back when a tenant with a quota needs it (docs/design/preemption.md).
    node = make_node(gpus=1)
    (tmp_path / "cuslice.yaml").write_text(
        "scheduler:\n  quantum: 50ms\n  gpu_memory: 16GiB\ntenants:\n  - name: batch\n    allow_env: true\n    memory: 12GiB\n"
        "    priority: low\n    preemptible: true\n    match: {uid: 4242}\n")
    node.scheduler.process.send_signal(signal.SIGHUP)
    node.kubelet.ok("wait_devices", resource=MEMORY, total=16, healthy=16)
    assert node.kubelet.admit("a", memory=16)["ok"]


def test_the_real_hook_in_a_one_gpu_container_view_charges_the_nodes_gpu(make_node):
    """Inside a container NVML numbers the one GPU it sees 0; CUSLICE_GPU_INDICES from the
    Allocate answer makes the hook use the node's index, where the scheduler counts the tenant."""
    node = make_node(gpus=3)
    node.kubelet.admit("fill", memory=14)  # GPU 0 nearly full: the next pod goes elsewhere
    pod = node.kubelet.admit("p", memory=4)
    env = tenant_env(pod)
    gpu = int(env["CUSLICE_GPU_INDICES"])
    assert gpu != 0, env
    held = 256 << 20
    child = subprocess.Popen(
        [str(built("CUSLICE_HOOK_TESTS")), "--gtest_filter=TenantChild.Hold"],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
             "LD_PRELOAD": str(built("CUSLICE_HOOK_LIB")),
             "LD_LIBRARY_PATH": str(built("CUSLICE_FAKE_DRIVER_DIR")),
             "FAKE_CUDA_DEVICE_COUNT": "1",  # the container's view: its one GPU
             "TEST_HOLD": str(held),
             "CUSLICE_SOCKET": str(node.scheduler.socket),
             "CUSLICE_TENANT": env["CUSLICE_TENANT"],
             "CUSLICE_GPU_INDICES": env["CUSLICE_GPU_INDICES"],
             "CUSLICE_MEMORY_LIMIT": env["CUSLICE_MEMORY_LIMIT"]},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in child.stdout:
            if line.strip() == "ready":
                break
        else:
            pytest.fail(f"the child did not hold its memory: {child.stderr.read()}")
        name = tenant_name(pod)
        rows = {g["index"]: {r["name"]: r for r in g["tenants"]} for g in node.status()["gpus"]}
        assert rows[gpu][name]["memory_used_bytes"] >= held, rows
        assert rows.get(0, {}).get(name, {}).get("memory_used_bytes", 0) == 0, rows
    finally:
        child.stdin.close()
        child.wait(timeout=DEADLINE)


def test_the_hook_never_prints_the_credential(tmp_path):
    """With no scheduler the hook warns once, naming the tenant: not its credential, which
    would land in the pod's log."""
    key = "0123456789abcdef0123456789abcdef"
    child = subprocess.run(
        [str(built("CUSLICE_HOOK_TESTS")), "--gtest_filter=TenantChild.Hold"],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
             "LD_PRELOAD": str(built("CUSLICE_HOOK_LIB")),
             "LD_LIBRARY_PATH": str(built("CUSLICE_FAKE_DRIVER_DIR")),
             "TEST_HOLD": str(64 << 20),
             "CUSLICE_SOCKET": str(tmp_path / "nobody.sock"),
             "CUSLICE_TENANT": "k8s-0123456789ab:" + key,
             "CUSLICE_LOG_LEVEL": "warn"},
        input="", capture_output=True, text=True, timeout=DEADLINE)
    assert child.returncode == 0, child.stdout + child.stderr
    assert "tenant 'k8s-0123456789ab' asked for" in child.stderr, child.stderr
    assert key not in child.stderr + child.stdout


@pytest.mark.parametrize("control", ["c.sock", "sub/c.sock"])
def test_a_control_socket_containers_would_be_given_is_refused(tmp_path, control):
    result = subprocess.run(
        [str(built("CUSLICE_DEVICE_PLUGIN_BIN")), "--hook", str(built("CUSLICE_HOOK_LIB")),
         "--scheduler-socket", str(tmp_path / "s.sock"), "--scheduler-control-socket", str(tmp_path / control),
         "--preload-file", "", "--plugin-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=DEADLINE)
    assert result.returncode == 2, result.stderr
    assert (f"--scheduler-control-socket {tmp_path / control} is in the directory of --scheduler-socket "
            f"{tmp_path / 's.sock'} (or below it), which every container is given") in result.stderr
