"""cuslice-dra-plugin end to end: the ResourceSlice it publishes (checked by the test API
server against resource.k8s.io/v1), and claims allocated as kube-scheduler would, prepared
through the kubelet's DRA API into scheduler tenants with exactly their amounts (`cuslice
status --json`, the scheduler's own list), then unprepared; across plugin, scheduler and API
server restarts.
"""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cdi_schema import cdi_validator
from dra_harness import DRIVER, GiB, NODE, Kubelet, built, claim, make_node, wait_for  # noqa: F401

def cdi_spec(node, c):
    path = node.cdi / f"gpu.cuslice.io-claim_{c['metadata']['uid']}.json"
    return json.loads(path.read_text()) if path.exists() else None


def check_cdi(spec):
    cdi_validator().validate(spec)


def env_of(spec):
    return dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])


def tenant_of(c):
    return "dra-" + c["metadata"]["uid"]


def test_the_slice_lists_each_gpu_with_its_capacity_and_attributes(make_node):
    node = make_node(gpus=4, memory=16 * GiB, plugin_args=("--reserve-memory", "1GiB"))
    s = node.wait_slice(4)
    assert s["spec"]["driver"] == DRIVER and s["spec"]["nodeName"] == NODE
    assert s["spec"]["pool"]["name"] == NODE and s["spec"]["pool"]["resourceSliceCount"] == 1
    # Deleted with its node by the garbage collector.
    assert s["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": NODE,
                                                 "uid": node.node_uid, "controller": True}]
    devices = {d["name"]: d for d in s["spec"]["devices"]}
    assert sorted(devices) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    uuids = set()
    for name, d in devices.items():
        assert d["allowMultipleAllocations"] is True
        a = d["attributes"]
        assert a["index"] == {"int": int(name[4:])}
        assert a["uuid"]["string"].startswith("GPU-")
        uuids.add(a["uuid"]["string"])
        assert a["productName"]["string"]
        assert a["mode"] == {"string": "time-sliced"}  # the test scheduler has no spatial GPU
        assert a["cudaComputeCapability"] == {"version": "9.0.0"}
        assert a["architecture"] == {"string": "hopper"}
        memory, compute = d["capacity"]["memory"], d["capacity"]["compute"]
        assert memory["value"] == "15Gi"  # 16 GiB less the reserve
        assert memory["requestPolicy"] == {"default": "15Gi",
                                           "validRange": {"min": "256Mi", "max": "15Gi", "step": "256Mi"}}
        assert compute["value"] == "100"
        assert compute["requestPolicy"] == {"default": "100", "validRange": {"min": "1", "max": "100", "step": "1"}}
    assert len(uuids) == 4
    assert node.api.store.writes and not node.api.store.rejected


def test_a_subrequest_answers_for_the_request_the_container_names(make_node):
    """With `firstAvailable` the allocation's result names the subrequest ("gpu/small"); the
    kubelet gives the claim's devices to a container by the request it names in
    `resources.claims[].request` ("gpu"), so the answer names the parent request."""
    node = make_node(gpus=1)
    node.wait_slice(1)
    c = node.allocate(claim("first", [("gpu/small", "gpu-0", "4Gi", "20", None)]))
    answer = node.kubelet.prepare(c)[c["metadata"]["uid"]]
    assert answer["error"] == ""
    assert [d["request_names"] for d in answer["devices"]] == [["gpu"]], answer


def test_a_claim_becomes_a_tenant_with_exactly_its_memory_and_share(make_node):
    node = make_node(gpus=2)
    uuids = {d["name"]: d["attributes"]["uuid"]["string"] for d in node.wait_slice(2)["spec"]["devices"]}
    c = node.allocate(claim("small", [("gpu", "gpu-1", "8Gi", "30", "a1b2c3d4-share")], pod="trainer-0"))
    answer = node.kubelet.prepare(c)[c["metadata"]["uid"]]
    assert answer["error"] == ""
    cdi_id = f"gpu.cuslice.io/claim={c['metadata']['uid']}"
    assert answer["devices"] == [{"request_names": ["gpu"], "pool_name": NODE, "device_name": "gpu-1",
                                  "cdi_device_ids": [cdi_id], "share_id": "a1b2c3d4-share"}]
    tenant = tenant_of(c)
    t = wait_for("the tenant", lambda: node.tenants().get(tenant))
    assert t["memory_quota_bytes"] == 8 * GiB
    assert t["share"] == pytest.approx(0.30)
    assert t["limit"] == pytest.approx(1.0)
    mine = node.plugin_tenants()[tenant]
    assert mine["gpus"] == [1] and mine["memory_bytes"] == 8 * GiB
    assert mine["namespace"] == "team-a" and mine["pod"] == "trainer-0"
    spec = cdi_spec(node, c)
    check_cdi(spec)
    assert spec["kind"] == "gpu.cuslice.io/claim" and spec["devices"][0]["name"] == c["metadata"]["uid"]
    env = env_of(spec)
    assert env["CUSLICE_TENANT"].split(":")[0] == tenant and len(env["CUSLICE_TENANT"].split(":")[1]) >= 16
    assert env["CUSLICE_GPU_INDICES"] == "1" and env["CUSLICE_MEMORY_LIMIT"] == str(8 * GiB)
    assert env["NVIDIA_VISIBLE_DEVICES"] == uuids["gpu-1"]
    mounts = {m["containerPath"]: m for m in spec["devices"][0]["containerEdits"]["mounts"]}
    assert mounts["/opt/cuslice/lib/libcuslice.so"]["hostPath"] == os.environ["CUSLICE_HOOK_LIB"]
    assert "ro" in mounts["/opt/cuslice/lib/libcuslice.so"]["options"]
    assert Path(mounts["/etc/ld.so.preload"]["hostPath"]).read_text() == "/opt/cuslice/lib/libcuslice.so\n"
    assert mounts["/run/cuslice"]["hostPath"] == str(node.scheduler.socket.parent)
    nodes = {d["path"] for d in spec["devices"][0]["containerEdits"]["deviceNodes"]}
    assert nodes == {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia1"}
    # Asked again (the kubelet retries): the same answer, the same tenant.
    assert node.kubelet.prepare(c)[c["metadata"]["uid"]] == answer
    assert env_of(cdi_spec(node, c)) == env


# A container's process on the fake driver: what CUDA says of its GPU, 3 GiB, then 2 GiB more;
# it holds them until a line comes on stdin.
CUDA_PROCESS = r"""
import ctypes, json, sys
cuda = ctypes.CDLL("libcuda.so.1")
out = {"init": cuda.cuInit(0)}
if out["init"] == 0:
    device, ctx = ctypes.c_int(), ctypes.c_void_p()
    cuda.cuDeviceGet(ctypes.byref(device), 0)
    cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device)
    cuda.cuCtxSetCurrent(ctx)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    a, b = ctypes.c_uint64(), ctypes.c_uint64()
    out.update(total=total.value, first=cuda.cuMemAlloc_v2(ctypes.byref(a), ctypes.c_size_t(3 << 30)),
               more=cuda.cuMemAlloc_v2(ctypes.byref(b), ctypes.c_size_t(2 << 30)))
print(json.dumps(out), flush=True)
sys.stdin.readline()
"""


def test_a_process_started_from_the_cdi_spec_joins_the_claims_tenant_and_is_held_to_its_quota(make_node):
    node = make_node(gpus=1)
    node.wait_slice(1)
    c = node.allocate(claim("joined", [("gpu", "gpu-0", "4Gi", "30", "s")], pod="worker-0"))
    assert node.kubelet.prepare(c)[c["metadata"]["uid"]]["error"] == ""
    spec = cdi_spec(node, c)
    env = env_of(spec)
    # The hook sends CUSLICE_TENANT in 63 characters (wire::RegisterRequest): all of it must fit.
    assert len(env["CUSLICE_TENANT"]) <= 63
    mounts = {m["containerPath"]: m["hostPath"] for m in spec["devices"][0]["containerEdits"]["mounts"]}
    # As the runtime starts it: the spec's environment, its mounts as the host paths they name.
    env.update(PATH=os.environ.get("PATH", "/usr/bin:/bin"), LD_LIBRARY_PATH=str(built("CUSLICE_FAKE_DRIVER_DIR")),
               FAKE_CUDA_DEVICE_COUNT="1", FAKE_CUDA_DEVICE_MEMORY=str(node.memory),
               CUSLICE_SOCKET=os.path.join(mounts["/run/cuslice"], os.path.basename(env["CUSLICE_SOCKET"])),
               LD_PRELOAD=mounts["/opt/cuslice/lib/libcuslice.so"])
    # Under a sanitizer (CUSLICE_TEST_PRELOAD names its runtime) the runtime comes first, before
    # the instrumented hook, and the sanitizer's options reach the process.
    if os.environ.get("CUSLICE_TEST_PRELOAD"):
        env["LD_PRELOAD"] = os.environ["CUSLICE_TEST_PRELOAD"] + ":" + env["LD_PRELOAD"]
        env.update({k: v for k, v in os.environ.items() if k in ("ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS",
                                                                "TSAN_OPTIONS")})
    process = subprocess.Popen([sys.executable, "-c", CUDA_PROCESS], env=env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = json.loads(process.stdout.readline() or "{}")
        assert seen.get("init") == 0, process.stderr.read() if process.poll() is not None else seen
        wait_for("the process in the claim's tenant",
                 lambda: process.pid in node.tenants().get(tenant_of(c), {}).get("pids", []))
        assert seen["total"] == 4 * GiB  # the quota, as the GPU's memory
        assert seen["first"] == 0 and seen["more"] == 2  # CUDA_ERROR_OUT_OF_MEMORY
    finally:
        process.stdin.close()
        process.wait(timeout=30)
    assert node.kubelet.unprepare(c)[c["metadata"]["uid"]]["error"] == ""
    wait_for("the tenant gone", lambda: tenant_of(c) not in node.tenants())


def test_two_claims_share_one_gpu_each_with_its_own_amounts(make_node):
    node = make_node(gpus=1)
    node.wait_slice(1)
    a = node.allocate(claim("a", [("gpu", "gpu-0", "8Gi", "30", "share-a")]))
    b = node.allocate(claim("b", [("gpu", "gpu-0", "4Gi", "50", "share-b")]))
    answers = node.kubelet.prepare(a, b)
    assert all(r["error"] == "" for r in answers.values()), answers
    assert {r["devices"][0]["share_id"] for r in answers.values()} == {"share-a", "share-b"}
    tenants = wait_for("both tenants", lambda: (t := node.tenants()) and tenant_of(a) in t and tenant_of(b) in t and t)
    assert tenants[tenant_of(a)]["memory_quota_bytes"] == 8 * GiB
    assert tenants[tenant_of(a)]["share"] == pytest.approx(0.30)
    assert tenants[tenant_of(b)]["memory_quota_bytes"] == 4 * GiB
    assert tenants[tenant_of(b)]["share"] == pytest.approx(0.50)
    mine = node.plugin_tenants()
    assert mine[tenant_of(a)]["gpus"] == mine[tenant_of(b)]["gpus"] == [0]
    # Unpreparing one returns its capacity; the other stays.
    assert node.kubelet.unprepare(a)[a["metadata"]["uid"]]["error"] == ""
    wait_for("a's tenant gone", lambda: tenant_of(a) not in node.tenants())
    assert tenant_of(b) in node.tenants() and cdi_spec(node, a) is None and cdi_spec(node, b)
    # The device is held by (claim, share): b's share alone now.
    assert f"{NODE}/gpu-0: held by {b['metadata']['uid']}/share-b\n" in node.logs()
    assert node.kubelet.unprepare(b)[b["metadata"]["uid"]]["error"] == ""
    wait_for("the last holder gone", lambda: f"{NODE}/gpu-0: held by no prepared claim" in node.logs())


def test_a_claim_of_two_gpus_is_one_tenant_on_both(make_node):
    node = make_node(gpus=4)
    node.wait_slice(4)
    c = node.allocate(claim("pair", [("gpus", "gpu-2", "6Gi", "40", None), ("gpus", "gpu-3", "6Gi", "40", None)]))
    answer = node.kubelet.prepare(c)[c["metadata"]["uid"]]
    assert answer["error"] == ""
    assert sorted(d["device_name"] for d in answer["devices"]) == ["gpu-2", "gpu-3"]
    tenant = tenant_of(c)
    t = wait_for("the tenant", lambda: node.tenants().get(tenant))
    assert t["memory_quota_bytes"] == 6 * GiB and t["share"] == pytest.approx(0.40)
    assert node.plugin_tenants()[tenant]["gpus"] == [2, 3]
    env = env_of(cdi_spec(node, c))
    assert env["CUSLICE_GPU_INDICES"] == "2,3" and len(env["NVIDIA_VISIBLE_DEVICES"].split(",")) == 2
    nodes = {d["path"] for d in cdi_spec(node, c)["devices"][0]["containerEdits"]["deviceNodes"]}
    assert {"/dev/nvidia2", "/dev/nvidia3"} <= nodes and "/dev/nvidia0" not in nodes


def test_unprepare_removes_the_tenant_and_is_idempotent(make_node):
    node = make_node(gpus=1)
    node.wait_slice(1)
    c = node.allocate(claim("once", [("gpu", "gpu-0", "2Gi", "10", "s")]))
    assert node.kubelet.prepare(c, version="v1beta1")[c["metadata"]["uid"]]["devices"][0].get("share_id") is None
    wait_for("the tenant", lambda: tenant_of(c) in node.tenants())
    assert node.kubelet.unprepare(c, version="v1beta1")[c["metadata"]["uid"]] == {"error": ""}
    wait_for("the tenant gone", lambda: tenant_of(c) not in node.tenants())
    assert tenant_of(c) not in node.plugin_tenants() and cdi_spec(node, c) is None
    assert node.kubelet.unprepare(c)[c["metadata"]["uid"]] == {"error": ""}  # again: nothing to do
    checkpoint = json.loads((node.plugin_dir / "checkpoint.json").read_text())
    assert checkpoint["claims"] == {}
    assert oct((node.plugin_dir / "checkpoint.json").stat().st_mode & 0o777) == "0o600"


def test_claims_the_driver_cannot_enforce_are_refused_with_a_reason(make_node):
    node = make_node(gpus=2)
    node.wait_slice(2)
    uneven = node.allocate(claim("uneven", [("g", "gpu-0", "4Gi", "20", None), ("g", "gpu-1", "8Gi", "20", None)]))
    unallocated = claim("pending", [("g", "gpu-0", "1Gi", "10", None)])
    del unallocated["status"]
    node.allocate(unallocated)
    elsewhere = claim("elsewhere", [("g", "gpu-0", "1Gi", "10", None)])
    elsewhere["status"]["allocation"]["devices"]["results"][0]["pool"] = "node-b"
    node.allocate(elsewhere)
    gone = claim("gone", [("g", "gpu-0", "1Gi", "10", None)])  # never stored: 404
    answers = node.kubelet.prepare(uneven, unallocated, elsewhere, gone)
    assert "same amounts" in answers[uneven["metadata"]["uid"]]["error"]
    assert "not allocated" in answers[unallocated["metadata"]["uid"]]["error"]
    assert "no device" in answers[elsewhere["metadata"]["uid"]]["error"]
    assert "404" in answers[gone["metadata"]["uid"]]["error"]
    assert not [t for t in node.tenants() if t.startswith("dra-")]


def test_a_whole_device_without_consumed_capacity_is_the_whole_gpu(make_node):
    node = make_node(gpus=1, memory=16 * GiB, plugin_args=("--reserve-memory", "512MiB"))
    node.wait_slice(1)
    c = node.allocate(claim("whole", [("gpu", "gpu-0", None, None, None)]))
    assert node.kubelet.prepare(c)[c["metadata"]["uid"]]["error"] == ""
    t = wait_for("the tenant", lambda: node.tenants().get(tenant_of(c)))
    assert t["memory_quota_bytes"] == 16 * GiB - 512 * (1 << 20) and t["share"] == pytest.approx(1.0)


def test_a_restarted_plugin_answers_as_before_and_a_restarted_scheduler_gets_its_tenants_back(make_node):
    node = make_node(gpus=2)
    node.wait_slice(2)
    c = node.allocate(claim("kept", [("gpu", "gpu-0", "3Gi", "25", "s1")]))
    first = node.kubelet.prepare(c)[c["metadata"]["uid"]]
    env = env_of(cdi_spec(node, c))
    writes = len(node.api.store.writes)
    node.stop_plugin(signal.SIGKILL)  # mid-way: nothing cleaned up
    node.start_plugin()
    assert node.kubelet.prepare(c)[c["metadata"]["uid"]] == first
    assert env_of(cdi_spec(node, c)) == env  # same tenant, same credential
    wait_for("the slice", lambda: node.slice())
    assert len(node.api.store.writes) == writes  # the slice was still right: left alone
    # The kubelet restarts: it finds the plugin again and repeats its calls.
    node.kubelet.close()
    node.kubelet = Kubelet(node.registry)
    node.kubelet.ok("register")
    assert node.kubelet.prepare(c)[c["metadata"]["uid"]] == first
    node.restart_scheduler()
    t = wait_for("the tenant made again", lambda: node.tenants().get(tenant_of(c)))
    assert t["memory_quota_bytes"] == 3 * GiB and t["share"] == pytest.approx(0.25)
    assert node.kubelet.unprepare(c)[c["metadata"]["uid"]]["error"] == ""
    wait_for("the tenant gone", lambda: tenant_of(c) not in node.tenants())


def test_the_slice_follows_the_scheduler_and_the_api_server_coming_back(make_node):
    node = make_node(gpus=2)
    node.wait_slice(2)
    node.scheduler.stop()
    node.wait_slice(0)  # nothing placed here could be enforced
    node.restart_scheduler()
    node.wait_slice(2)
    # The API server goes away; meanwhile the slice is lost and a claim is allocated.
    node.api.stop()
    c = claim("later", [("gpu", "gpu-1", "1Gi", "5", None)])
    node.api.store.objects.clear()
    node.api.store.put_claim(c)
    refs = node.kubelet.prepare(c)[c["metadata"]["uid"]]
    assert "API server" in refs["error"]
    node.api.start()
    node.wait_slice(2)
    assert node.kubelet.prepare(c)[c["metadata"]["uid"]]["error"] == ""
    wait_for("the tenant", lambda: tenant_of(c) in node.tenants())
    assert "trying again" in node.logs()


def test_a_registration_socket_someone_removed_is_served_again(make_node):
    node = make_node(gpus=1)
    [socket_file] = node.registry.glob("*-reg.sock")
    socket_file.unlink()  # the new one may get the old one's inode number: only its presence tells
    wait_for("the socket again", socket_file.exists)
    wait_for("the plugin's registration", lambda: node.kubelet("register")["ok"])
    c = node.allocate(claim("after", [("gpu", "gpu-0", "1Gi", "10", None)]))
    assert node.kubelet.prepare(c)[c["metadata"]["uid"]]["error"] == ""


def test_a_gpu_that_is_gone_leaves_the_slice(make_node):
    node = make_node(gpus=3)
    generation = node.wait_slice(3)["spec"]["pool"]["generation"]
    node.stop_plugin()
    node.gpus = 2  # NVML reports one GPU less when the plugin starts again
    node.start_plugin()
    s = node.wait_slice(2)
    assert [d["name"] for d in s["spec"]["devices"]] == ["gpu-0", "gpu-1"]
    assert s["spec"]["pool"]["generation"] == generation + 1
    c = node.allocate(claim("late", [("gpu", "gpu-2", "1Gi", "10", None)]))  # allocated before it went
    assert "not a GPU of this node" in node.kubelet.prepare(c)[c["metadata"]["uid"]]["error"]


def test_a_slice_someone_else_changed_is_put_back(make_node):
    node = make_node(gpus=2)
    s = node.wait_slice(2)
    generation = s["spec"]["pool"]["generation"]
    path = f"/apis/resource.k8s.io/v1/resourceslices/{s['metadata']['name']}"
    with node.api.store.lock:
        del node.api.store.objects[path]
        node.api.store.deleted.add(path)
        node.api.store.bump({})
    again = node.wait_slice(2)
    assert again["spec"]["devices"] == s["spec"]["devices"]
    with node.api.store.lock:
        obj = node.api.store.objects[path]
        obj["spec"]["devices"] = obj["spec"]["devices"][:1]
        node.api.store.bump(obj)
    fixed = node.wait_slice(2)
    assert fixed["spec"]["pool"]["generation"] > generation


def test_what_it_cannot_start_with_is_said_and_nothing_half_started(make_node, tmp_path):
    node = make_node(gpus=1)
    node.wait_slice(1)
    node.stop_plugin()
    base = [str(built("CUSLICE_DRA_PLUGIN_BIN")), "--node-name", NODE, "--hook", os.environ["CUSLICE_HOOK_LIB"],
            "--plugin-dir", str(node.plugin_dir), "--registry-dir", str(node.registry), "--cdi-dir", str(node.cdi),
            "--scheduler-socket", str(node.scheduler.socket), "--preload-file", ""]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LD_LIBRARY_PATH": str(built("CUSLICE_FAKE_DRIVER_DIR"))}

    def run(*args):
        return subprocess.run(base + list(args), env=env, capture_output=True, text=True, timeout=60)

    (tmp_path / "bad-kubeconfig").write_text("clusters: [unclosed")
    out = run("--kubeconfig", str(tmp_path / "bad-kubeconfig"))
    assert out.returncode == 2 and "bad-kubeconfig" in out.stderr, out.stderr
    out = run()  # no kubeconfig, and not in a pod
    assert out.returncode == 2 and "--kubeconfig" in out.stderr, out.stderr
    out = run("--kubeconfig", str(node.kubeconfig), "--memory-step", "1KiB")
    assert out.returncode == 2 and "--memory-step" in out.stderr, out.stderr
    (node.plugin_dir / "checkpoint.json").write_text("{not json")
    out = run("--kubeconfig", str(node.kubeconfig))
    assert out.returncode == 1 and "checkpoint.json" in out.stderr and "move it away" in out.stderr, out.stderr
    assert not list(node.registry.glob("*-reg.sock"))  # never offered itself to the kubelet


def test_a_gpu_lost_while_the_driver_runs_leaves_the_slice_and_comes_back(make_node):
    node = make_node(gpus=3, nvml_fault=True)
    first = node.wait_slice(3)
    generation = first["spec"]["pool"]["generation"]
    kept = node.allocate(claim("kept", [("gpu", "gpu-1", "2Gi", "20", None)]))
    assert node.kubelet.prepare(kept)[kept["metadata"]["uid"]]["error"] == ""
    # NVML stops answering for GPU 1 (fallen off the bus, or taken out after an error): at the
    # next look it leaves the slice, so kube-scheduler places nothing more there.
    node.lose_gpus(1)
    s = node.wait_slice(2)
    assert [d["name"] for d in s["spec"]["devices"]] == ["gpu-0", "gpu-2"]
    assert s["spec"]["devices"] == [first["spec"]["devices"][0], first["spec"]["devices"][2]]
    assert s["spec"]["pool"]["generation"] == generation + 1
    wait_for("the loss in the log", lambda: "GPU 1 (GPU-" in node.logs() and "leaves the slice" in node.logs())
    late = node.allocate(claim("late", [("gpu", "gpu-1", "1Gi", "10", None)]))  # allocated before it went
    assert "not a GPU of this node" in node.kubelet.prepare(late)[late["metadata"]["uid"]]["error"]
    # A claim prepared before stays prepared: its tenant is the kubelet's to unprepare.
    assert tenant_of(kept) in node.tenants()
    assert node.kubelet.prepare(kept)[kept["metadata"]["uid"]]["error"] == ""
    # NVML answers again: the same device is back, as it was, in a newer generation.
    node.lose_gpus()
    s = node.wait_slice(3)
    assert s["spec"]["devices"] == first["spec"]["devices"]
    assert s["spec"]["pool"]["generation"] == generation + 2
    wait_for("the return in the log", lambda: "is back" in node.logs())
    assert node.kubelet.prepare(late)[late["metadata"]["uid"]]["error"] == ""
    # All GPUs gone: an empty slice, not a stale one.
    node.lose_gpus(0, 1, 2)
    assert node.wait_slice(0)["spec"]["pool"]["generation"] == generation + 3
    node.lose_gpus()
    node.wait_slice(3)


def test_a_claim_shared_by_two_pods_is_prepared_once_and_unprepared_by_the_kubelet_after_the_last(make_node):
    # The kubelet counts the pods of a claim: it calls NodePrepareResources for the first pod
    # only (later pods find it prepared) and NodeUnprepareResources once the last pod is gone
    # (pkg/kubelet/cm/dra/manager.go: claimInfo.isPrepared(), len(claimInfo.PodUIDs) > 1). It
    # repeats either call after its own restart or a failed call. So the driver counts nothing:
    # a repeated prepare is the same answer and tenant, and one unprepare ends the claim.
    node = make_node(gpus=1)
    node.wait_slice(1)
    c = claim("shared", [("gpu", "gpu-0", "4Gi", "25", "share-1")], pod="pod-a")
    c["status"]["reservedFor"].append({"resource": "pods", "name": "pod-b", "uid": "b8c7e0b4-0000-4000-8000-000000000002"})
    node.allocate(c)
    uid = c["metadata"]["uid"]
    first = node.kubelet.prepare(c)[uid]
    assert first["error"] == ""
    env = env_of(cdi_spec(node, c))
    # The second pod (or the kubelet again after a restart): the same devices, the same tenant
    # and credential, one tenant in the scheduler.
    assert node.kubelet.prepare(c)[uid] == first
    assert env_of(cdi_spec(node, c)) == env
    tenants = [t for t in node.tenants() if t.startswith("dra-")]
    assert tenants == [tenant_of(c)]
    t = node.tenants()[tenant_of(c)]
    assert t["memory_quota_bytes"] == 4 * GiB and t["share"] == pytest.approx(0.25)
    assert node.plugin_tenants()[tenant_of(c)]["pod"] == "pod-a"  # the first pod reserved: the tenant's label
    checkpoint = json.loads((node.plugin_dir / "checkpoint.json").read_text())
    assert list(checkpoint["claims"]) == [uid]
    # The last pod gone: one unprepare removes it; a repeated one finds nothing to do.
    assert node.kubelet.unprepare(c)[uid]["error"] == ""
    wait_for("the tenant gone", lambda: tenant_of(c) not in node.tenants())
    assert cdi_spec(node, c) is None
    assert node.kubelet.unprepare(c)[uid]["error"] == ""
    assert f"{NODE}/gpu-0: held by no prepared claim" in node.logs()
