"""What the DRA driver's end-to-end tests share: a node made of the real cuslice-scheduler, the
real cuslice-dra-plugin on the fake NVML, a test kubelet (dra_kubelet.cpp) that speaks the
kubelet's plugin registration and DRA APIs over Unix sockets, and a test API server
(api_server.py) that stores ResourceSlices and ResourceClaims and checks what the driver
writes against resource.k8s.io/v1. Claims are allocated by the test, as kube-scheduler would.

Waits are bounded polls that return as soon as the condition holds.
"""
import os
import sys
import uuid

import pytest

sys.path.insert(0, os.environ.get("CUSLICE_HARNESS_DIR", ""))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "device_plugin"))
from scheduler_harness import DEADLINE, built, eventually, free_port, unique_shm_name  # noqa: E402
from device_plugin_harness import LineDriven, NodeParts, NodeScheduler, plugin_tenant_records  # noqa: E402
from api_server import ApiServer  # noqa: E402

GiB = 1 << 30
DRIVER = "gpu.cuslice.io"
NODE = "node-a"
SLICE = f"{NODE}-{DRIVER}"


def wait_for(what, condition, deadline=DEADLINE):
    """scheduler_harness.eventually, with the words first (as these tests read best)."""
    return eventually(condition, what, timeout=deadline)


class Kubelet(LineDriven):
    def __init__(self, registry):
        super().__init__([str(built("CUSLICE_DRA_KUBELET")), "--registry-dir", str(registry)])

    def prepare(self, *claims, version="v1"):
        refs = [{"namespace": c["metadata"]["namespace"], "uid": c["metadata"]["uid"], "name": c["metadata"]["name"]}
                for c in claims]
        return self.ok("prepare", version=version, claims=refs)["claims"]

    def unprepare(self, *claims, version="v1"):
        refs = [{"namespace": c["metadata"]["namespace"], "uid": c["metadata"]["uid"], "name": c["metadata"]["name"]}
                for c in claims]
        return self.ok("unprepare", version=version, claims=refs)["claims"]


def claim(name, devices, namespace="team-a", pod=None):
    """A ResourceClaim allocated as kube-scheduler would: `devices` is a list of
    (request, device, memory, compute, share_id); memory and compute are quantities, or None
    for a device allocated whole (no consumable capacity)."""
    uid = str(uuid.uuid4())
    requests, results = {}, []
    for request, device, memory, compute, share_id in devices:
        capacity = {k: v for k, v in (("memory", memory), ("compute", compute)) if v is not None}
        exact = {"deviceClassName": "gpu.cuslice.io", "allocationMode": "ExactCount", "count": 1}
        if capacity:
            exact["capacity"] = {"requests": capacity}
        if "/" in request:  # "parent/sub": the subrequest of `firstAvailable` the allocator took
            parent, sub = request.split("/", 1)
            requests.setdefault(parent, {"name": parent, "firstAvailable": [{"name": sub, **exact}]})
        else:
            requests.setdefault(request, {"name": request, "exactly": exact})
        result = {"request": request, "driver": DRIVER, "pool": NODE, "device": device}
        if capacity:
            result["consumedCapacity"] = capacity
        if share_id:
            result["shareID"] = share_id
        results.append(result)
    for r in requests.values():
        if "exactly" in r:
            r["exactly"]["count"] = sum(1 for d in devices if d[0] == r["name"])
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {"devices": {"requests": list(requests.values())}},
        "status": {
            "allocation": {"devices": {"results": results}},
            "reservedFor": [{"resource": "pods", "name": pod or f"{name}-pod", "uid": str(uuid.uuid4())}],
        },
    }


class Node(NodeParts):
    """A node: scheduler, API server, test kubelet and driver, on private sockets and segment."""

    TIMING = ("--poll-interval", "0.1", "--scheduler-grace", "0.5", "--backoff-max", "0.5", "--resync", "5")

    def __init__(self, tmp_path, gpus=4, memory=16 * GiB, plugin_args=(), nvml_fault=False, cdi_dir=None):
        self.tmp = tmp_path
        self.gpus = gpus
        self.memory = memory
        self.plugin_args = tuple(plugin_args)
        self.plugin_binary = "CUSLICE_DRA_PLUGIN_BIN"
        if nvml_fault:
            self.use_nvml_fault()
        self.registry = tmp_path / "plugins_registry"
        self.plugin_dir = tmp_path / "plugins" / DRIVER
        self.cdi = cdi_dir or tmp_path / "cdi"
        self.make_dev()
        self.scheduler = NodeScheduler(tmp_path, unique_shm_name(), free_port()).wait_ready()
        self.api = ApiServer()
        self.node_uid = str(uuid.uuid4())
        self.api.store.objects[f"/api/v1/nodes/{NODE}"] = {
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": self.node_uid}}
        self.kubeconfig = self.api.kubeconfig(tmp_path / "kubeconfig")
        self.registry.mkdir()
        self.kubelet = Kubelet(self.registry)
        self.plugin = None
        self.plugin_logs = []
        self.start_plugin()

    def use_nvml_fault(self):
        """The plugin on nvml_fault.c's NVML, over the fake one: lose_gpus() takes GPUs away."""
        self.lost_file = self.tmp / "lost-gpus"
        wrapper = self.tmp / "dra-plugin-on-nvml-fault"
        wrapper.write_text(
            "#!/bin/sh\n"
            f"LD_LIBRARY_PATH={built('CUSLICE_NVML_FAULT_DIR')}:$LD_LIBRARY_PATH "
            f"NVML_FAULT_REAL={built('CUSLICE_FAKE_DRIVER_DIR') / 'libnvidia-ml.so.1'} "
            f"NVML_FAULT_LOST={self.lost_file} exec {built('CUSLICE_DRA_PLUGIN_BIN')} \"$@\"\n")
        wrapper.chmod(0o755)
        # launch_plugin takes the binary from a variable.
        self.plugin_binary = "CUSLICE_DRA_PLUGIN_ON_NVML_FAULT"
        os.environ[self.plugin_binary] = str(wrapper)

    def lose_gpus(self, *indices):
        """NVML answers GPU_IS_LOST for these GPUs from now on (none: every GPU answers again)."""
        self.lost_file.write_text(",".join(map(str, indices)))

    def launch(self):
        """Starts the plugin without waiting for it (start_plugin waits for its registration)."""
        self.launch_plugin(self.plugin_binary,
                           ["--node-name", NODE, "--kubeconfig", str(self.kubeconfig),
                            "--plugin-dir", str(self.plugin_dir), "--registry-dir", str(self.registry),
                            "--cdi-dir", str(self.cdi), *self.TIMING, *self.plugin_args], default_level="debug")

    def start_plugin(self):
        self.launch()
        # A socket left by a plugin that was killed answers nothing until the new one replaces it.
        info = wait_for("the plugin's registration", lambda: (a := self.kubelet("register"))["ok"] and a)
        assert info["name"] == DRIVER and info["type"] == "DRAPlugin", info
        assert info["versions"] == ["v1.DRAPlugin", "v1beta1.DRAPlugin"], info
        assert info["endpoint"] == str(self.plugin_dir / "dra.sock"), info
        return info

    def slice(self):
        return self.api.store.slices().get(SLICE)

    def wait_slice(self, devices):
        """The published slice once it lists `devices` devices."""
        return wait_for(f"a slice of {devices} devices",
                        lambda: (s := self.slice()) and len(s["spec"]["devices"]) == devices and s)

    def plugin_tenants(self):
        """The scheduler's own record of the driver's tenants (its control socket's list):
        {name: {"gpus": [indices], "share", "limit", "memory_bytes", "namespace", "pod"}}."""
        tenants = {}
        for t in plugin_tenant_records(self.scheduler):
            name, namespace, pod = (f.split(b"\0")[0].decode() for f in (t[0], t[9], t[10]))
            mask = t[12] or 1 << t[2]
            tenants[name] = {"gpus": [g for g in range(32) if mask >> g & 1], "share": t[4] / 1e6,
                             "limit": t[5] / 1e6, "memory_bytes": t[6], "namespace": namespace, "pod": pod}
        return tenants

    def allocate(self, c):
        self.api.store.put_claim(c)
        return c

    def close(self):
        self.kubelet.close()
        if self.plugin and self.plugin.poll() is None:
            self.stop_plugin()
        self.scheduler.stop()
        self.api.stop()



@pytest.fixture
def make_node(tmp_path):
    made = []

    def make(**kwargs):
        node = Node(tmp_path, **kwargs)
        made.append(node)
        return node

    yield make
    for node in made:
        node.close()
        assert not node.api.store.rejected, node.api.store.rejected
