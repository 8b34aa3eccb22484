"""Where cuslice-device-plugin puts containers, end to end (device_plugin_harness.py): a GPU
where the memory and the compute both fit, by --placement; the check at a container's start
(compute without memory, compute that does not fit its GPU); compute over one GPU; and a node
that advertises no more containers than the scheduler can hold. The scheduler's own list of
plugin tenants and `cuslice status --json` say on which GPU each tenant is, with what share.

Waits are bounded polls that return as soon as the condition holds.
"""
import collections
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.environ.get("CUSLICE_HARNESS_DIR", ""))
from device_plugin_harness import (COMPUTE, MEMORY, GiB, gpu_of, healthy_count, make_node,  # noqa: E402,F401
                                   tenant_env, tenant_name)
from scheduler_harness import eventually  # noqa: E402

ORDERS = {"compute-first": [COMPUTE, MEMORY], "memory-first": [MEMORY, COMPUTE]}


def admitted(pod):
    """The pod was admitted and its container started."""
    return pod["ok"] and pod["containers"]["main"]["start"]["ok"]


def placed(node, pods):
    """{pod: GPU index} as the Allocate answers say, checked against the scheduler's record."""
    record = node.plugin_tenants()
    gpus = {}
    for name, pod in pods.items():
        gpu = int(tenant_env(pod)["CUSLICE_GPU_INDICES"])
        assert record[tenant_name(pod)]["gpu"] == gpu, (name, record)
        ids = pod["containers"]["main"][MEMORY]["ids"]
        assert {gpu_of(i) for i in ids} == {tenant_env(pod)["NVIDIA_VISIBLE_DEVICES"]}, ids
        gpus[name] = gpu
    return gpus


def shown_on(node):
    """{tenant: [GPU indices]} where `cuslice status --json` lists it."""
    shown = collections.defaultdict(list)
    for g in node.status()["gpus"]:
        for t in g["tenants"]:
            shown[t["name"]].append(g["index"])
    return dict(shown)


def shares_by_gpu(node):
    """{GPU: the sum of the shares of the plugin's tenants there}: each tenant's share as
    `cuslice status --json` shows it, on its GPU as the scheduler's list of them says."""
    status = node.tenants()
    sums = collections.defaultdict(float)
    for name, t in node.plugin_tenants().items():
        sums[t["gpu"]] += status[name]["share"]
    return sums


@pytest.mark.parametrize("order", ORDERS)
def test_four_pods_of_4gib_and_60_percent_land_on_four_gpus_each_with_its_share(make_node, order):
    node = make_node(gpus=4)
    pods = {f"p{i}": node.kubelet.admit(f"p{i}", memory=4, compute=60, order=ORDERS[order]) for i in range(4)}
    assert all(admitted(p) for p in pods.values()), pods
    assert sorted(placed(node, pods).values()) == [0, 1, 2, 3]
    for pod in pods.values():
        assert node.plugin_tenants()[tenant_name(pod)]["share"] == pytest.approx(0.60)
    eventually(lambda: all(node.tenants()[tenant_name(p)]["share"] == pytest.approx(0.60) for p in pods.values()),
               "cuslice status to show each tenant's 60%")
    # A fifth of 60% fits no GPU: refused at its compute call, naming each GPU's free compute.
    refused = node.kubelet.admit("p4", memory=4, compute=60, order=ORDERS["compute-first"])
    assert not refused["ok"]
    assert "cuslice.io/gpu-compute: 60% asked for, but no GPU of this node has that much compute free" in \
        refused["error"], refused
    assert "): 40%" in refused["error"], refused


@pytest.mark.parametrize("gpus", [2, 4])
@pytest.mark.parametrize("order", ORDERS)
def test_on_gpus_larger_than_the_tenant_room_each_gpu_still_offers_memory(make_node, gpus, order):
    # 141 GiB cards: more free units than the 64 tenants the scheduler can hold, so only some
    # are advertised healthy. Each GPU must keep some, or every container's memory goes to
    # the one GPU that has them and its compute is refused there at the start.
    node = make_node(gpus=gpus, memory=141 * GiB)
    pods = {f"p{i}": node.kubelet.admit(f"p{i}", memory=4, compute=60, order=ORDERS[order]) for i in range(gpus)}
    assert all(admitted(p) for p in pods.values()), pods
    where = placed(node, pods)
    assert sorted(where.values()) == list(range(gpus))
    # Before any process runs, `cuslice status` shows each tenant on its GPU, and only there.
    eventually(lambda: shown_on(node) == {tenant_name(pods[p]): [g] for p, g in where.items()},
               "cuslice status to show each tenant on its own GPU")
    # Free units advertised (the held ones stay healthy too): no more than the tenants left.
    assert healthy_count(node, MEMORY) - 4 * gpus <= 64 - gpus


@pytest.mark.parametrize("gpus", [2, 4, 8])
@pytest.mark.parametrize("placement", ["binpack", "spread"])
def test_twenty_pods_of_1gib_binpacked_or_spread(make_node, gpus, placement):
    node = make_node(gpus=gpus, plugin_args=("--placement", placement))
    pods = {f"p{i}": node.kubelet.admit(f"p{i}", memory=1) for i in range(20)}
    assert all(admitted(p) for p in pods.values()), pods
    per_gpu = collections.Counter(placed(node, pods).values())
    if placement == "binpack":
        assert per_gpu == {0: 16, 1: 4}
    else:
        assert per_gpu == {g: 20 // gpus + (1 if g < 20 % gpus else 0) for g in range(gpus)}
    # Containers without compute share what is left of their GPU, equally (the scheduler splits it).
    eventually(lambda: all(shares_by_gpu(node)[g] == pytest.approx(1.0, abs=1e-3) for g in per_gpu),
               "the GPUs' shares to add up to 100%")


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_preferred_allocation_is_one_gpu_where_memory_and_compute_both_fit(make_node, gpus):
    node = make_node(gpus=gpus)
    full = {f"f{i}": node.kubelet.admit(f"f{i}", memory=8, compute=80) for i in range(gpus - 1)}
    assert all(admitted(p) for p in full.values()), full
    # Binpack by memory alone would take GPU 0 (8 GiB free): only the last GPU has the compute.
    pod = node.kubelet.admit("p", memory=4, compute=40, order=ORDERS["compute-first"])
    assert admitted(pod), pod
    assert placed(node, {"p": pod}) == {"p": gpus - 1}
    assert node.plugin_tenants()[tenant_name(pod)]["share"] == pytest.approx(0.40)
    assert max(shares_by_gpu(node).values()) <= 1.0 + 1e-6


def test_a_container_whose_compute_does_not_fit_its_gpu_is_refused_at_start(make_node):
    node = make_node(gpus=2)
    assert admitted(node.kubelet.admit("a", memory=12, compute=20))  # GPU 0: 4 GiB, 80% left
    assert admitted(node.kubelet.admit("b", memory=8, compute=90))   # GPU 1: 8 GiB, 10% left
    # Memory first: 6 GiB fit GPU 1 only, and its 30% only GPU 0: no GPU holds both.
    pod = node.kubelet.admit("c", memory=6, compute=30, order=ORDERS["memory-first"])
    assert pod["ok"], pod
    start = pod["containers"]["main"]["start"]
    assert not start["ok"]
    assert "cuslice.io/gpu-compute: container team-a/c/main asks for 30% of GPU 1" in start["error"], start
    assert "only 10% of that GPU's compute is free" in start["error"], start
    # It keeps being refused while b runs, and starts once b is gone.
    assert not node.kubelet("start", namespace="team-a", pod="c", container="main")["ok"]
    node.kubelet.ok("delete", namespace="team-a", pod="b")
    eventually(lambda: node.kubelet("start", namespace="team-a", pod="c", container="main")["ok"], "c to start")
    assert node.plugin_tenants()[tenant_name(pod)]["share"] == pytest.approx(0.30)


@pytest.mark.parametrize("order", ORDERS)
def test_a_share_the_scheduler_cannot_fit_beside_its_file_tenants_is_refused_with_its_reason(make_node, tmp_path,
                                                                                             order):
    # The plugin does not see the file tenants' shares; the scheduler keeps each GPU within 100%.
    (tmp_path / "cuslice.yaml").write_text(
        "scheduler:\n  quantum: 50ms\ntenants:\n  - name: batch\n    allow_env: true\n    compute: {share: 50%}\n    memory: 1GiB\n"
        "    match: {uid: 4242}\n")
    node = make_node(gpus=1)
    pod = node.kubelet.admit("p", memory=2, compute=60, order=ORDERS[order])
    why = "GPU 0 has 50% of its time given to other tenants, so 60% more would be over 100%"
    if order == "compute-first":  # the tenant is made with its share: Allocate says no
        assert not pod["ok"] and why in pod["error"], pod
    else:  # made without one, then given it at the start: the start says no
        start = pod["containers"]["main"]["start"]
        assert not start["ok"] and "cuslice-scheduler refused it" in start["error"] and why in start["error"], pod
    assert admitted(node.kubelet.admit("q", memory=2, compute=40, order=ORDERS[order]))


def test_compute_without_memory_is_refused_at_start_with_its_reason(make_node):
    node = make_node(gpus=2)
    pod = node.kubelet.admit("c", compute=20)
    assert pod["ok"], pod  # the kubelet admits each resource on its own
    start = pod["containers"]["main"]["start"]
    assert not start["ok"]
    assert ("cuslice.io/gpu-compute: container team-a/c/main asks for 20% of a GPU but for no "
            "cuslice.io/gpu-memory: compute is a share of the GPU the container's memory is on, so it would get "
            "no GPU; ask for cuslice.io/gpu-memory too") in start["error"], start
    assert not node.kubelet("start", namespace="team-a", pod="c", container="main")["ok"]
    assert not node.tenants()
    eventually(lambda: "team-a/c/main holds 20 cuslice.io/gpu-compute but no cuslice.io/gpu-memory: it may not start"
               in node.logs(), "the plugin's warning")


@pytest.mark.parametrize("order", ORDERS)
def test_compute_over_one_gpu_is_refused_at_allocate_with_its_reason(make_node, order):
    node = make_node(gpus=2)
    refused = node.kubelet.admit("big", memory=2, compute=150, order=ORDERS[order])
    assert not refused["ok"]
    assert ("cuslice.io/gpu-compute: 150% asked for, but a container gets at most one GPU, 100%: ask for 100 or "
            "less, and for more than one GPU run one container per GPU") in refused["error"], refused
    assert admitted(node.kubelet.admit("whole", memory=2, compute=100))


def configmap_tenants(path, count):
    """A configuration with `count` tenants of 16 MiB each, besides the plugin's."""
    tenants = "".join(f"  - name: t{i}\n    memory: 16MiB\n    match: {{uid: {5000 + i}}}\n" for i in range(count))
    path.write_text("scheduler:\n  quantum: 50ms\ntenants:\n" + tenants)


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_the_node_advertises_no_more_containers_than_the_scheduler_can_hold(make_node, tmp_path, gpus):
    configmap_tenants(tmp_path / "cuslice.yaml", 56)  # 8 tenants left of 64
    node = make_node(gpus=gpus)
    # Each GPU keeps 56 x 16 MiB back: 15 GiB to hand out, of which 8 are advertised free.
    node.kubelet.ok("wait_devices", resource=MEMORY, total=15 * gpus, healthy=8)
    pods = {f"p{i}": node.kubelet.admit(f"p{i}", memory=1) for i in range(8)}
    assert all(admitted(p) for p in pods.values()), pods
    assert len(node.tenants()) == 64
    node.kubelet.ok("wait_devices", resource=MEMORY, healthy=8)  # the eight held, none free
    # The ninth is refused by the kubelet (as kube-scheduler would not place it), not by the
    # scheduler's "already 64 tenants".
    refused = node.kubelet.admit("p8", memory=1)
    assert not refused["ok"] and "requested number of devices unavailable" in refused["error"], refused
    node.kubelet.ok("delete", namespace="team-a", pod="p0")
    eventually(lambda: len(node.tenants()) == 63, "p0's tenant to go")
    node.kubelet.ok("wait_devices", resource=MEMORY, healthy=8)  # seven held, one free
    assert admitted(node.kubelet.admit("p8", memory=1))
