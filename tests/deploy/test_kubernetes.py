"""deploy/kubernetes: every manifest is a valid API object, and the pieces fit together.

No cluster: each document is deserialized into the Kubernetes client's model of its kind and
serialized back. The client's models drop fields they do not know, so a document that does
not come back unchanged has a misspelt or misplaced field.
"""
import json

import kubernetes.client
import pytest
import yaml

MODELS = {
    ("v1", "Namespace"): "V1Namespace",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Pod"): "V1Pod",
    ("apps/v1", "DaemonSet"): "V1DaemonSet",
}


class _Response:
    """What ApiClient.deserialize reads: an HTTP response's body."""

    def __init__(self, document):
        self.data = json.dumps(document)


@pytest.fixture(scope="module")
def documents(deploy_dir):
    found = []
    for path in sorted((deploy_dir / "kubernetes").glob("*.yaml")):
        found += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    assert found, "no manifests in deploy/kubernetes"
    return found


@pytest.fixture(scope="module")
def objects(documents):
    """{kind: model} for the one object of each kind."""
    client = kubernetes.client.ApiClient()
    by_kind = {}
    for name, doc in documents:
        key = (doc.get("apiVersion"), doc.get("kind"))
        assert key in MODELS, f"{name}: unexpected {key}"
        assert doc["kind"] not in by_kind, f"{name}: a second {doc['kind']}"
        by_kind[doc["kind"]] = client.deserialize(_Response(doc), MODELS[key])
    return by_kind


def test_every_manifest_round_trips_through_its_model(documents):
    client = kubernetes.client.ApiClient()
    for name, doc in documents:
        model = client.deserialize(_Response(doc), MODELS[(doc["apiVersion"], doc["kind"])])
        assert client.sanitize_for_serialization(model) == doc, name


def test_the_round_trip_catches_a_misspelt_field(documents):
    client = kubernetes.client.ApiClient()
    name, doc = next((n, d) for n, d in documents if d["kind"] == "DaemonSet")
    broken = json.loads(json.dumps(doc))
    broken["spec"]["template"]["spec"]["nodeSelecter"] = {"a": "b"}
    model = client.deserialize(_Response(broken), "V1DaemonSet")
    assert client.sanitize_for_serialization(model) != broken


def host_paths(pod_spec):
    return {v.host_path.path: v for v in pod_spec.volumes if v.host_path}


def mounts_of(container):
    return {m.name: m for m in container.volume_mounts}


def test_the_daemonset_runs_the_scheduler_on_gpu_nodes(objects):
    spec = objects["DaemonSet"].spec.template.spec
    assert spec.node_selector == {"nvidia.com/gpu.present": "true"}
    assert any(t.key == "nvidia.com/gpu" and t.operator == "Exists" for t in spec.tolerations)
    assert spec.host_pid  # tenants' pids as the host sees them
    [scheduler] = spec.containers
    assert scheduler.command[0].endswith("/cuslice-scheduler")


def test_the_daemonset_shares_the_hook_socket_and_segment_through_host_paths(objects):
    spec = objects["DaemonSet"].spec.template.spec
    volumes = host_paths(spec)
    assert {"/opt/cuslice", "/run/cuslice", "/dev/shm"} <= set(volumes)
    [scheduler] = spec.containers
    mounts = mounts_of(scheduler)
    assert mounts[volumes["/run/cuslice"].name].mount_path == "/run/cuslice"
    assert mounts[volumes["/dev/shm"].name].mount_path == "/dev/shm"
    env = {e.name: e.value for e in scheduler.env}
    assert env["CUSLICE_SOCKET"].startswith("/run/cuslice/")
    [installer] = spec.init_containers
    assert mounts_of(installer)[volumes["/opt/cuslice"].name].mount_path == "/host/opt/cuslice"


def test_the_daemonset_exposes_metrics_and_probes_them(objects):
    [scheduler] = objects["DaemonSet"].spec.template.spec.containers
    [port] = [p for p in scheduler.ports if p.name == "metrics"]
    assert port.container_port == 9400
    # Metrics are off unless asked for, on the port the container declares.
    assert scheduler.command[scheduler.command.index("--metrics-port") + 1] == "9400"
    probe = scheduler.liveness_probe
    assert probe is not None and probe.http_get.port == "metrics"
    assert probe.http_get.path == "/healthz"


def test_the_daemonset_reads_the_configmaps_file(objects):
    spec = objects["DaemonSet"].spec.template.spec
    [config_volume] = [v for v in spec.volumes if v.config_map]
    assert config_volume.config_map.name == objects["ConfigMap"].metadata.name
    [scheduler] = spec.containers
    config_path = scheduler.command[scheduler.command.index("--config") + 1]
    mount = mounts_of(scheduler)[config_volume.name]
    assert mount.sub_path is None  # a subPath mount would never see the ConfigMap change
    assert config_path.rsplit("/", 1) == [mount.mount_path, "cuslice.yaml"]
    assert "cuslice.yaml" in objects["ConfigMap"].data


@pytest.fixture(scope="module")
def tenant_config(objects):
    return yaml.safe_load(objects["ConfigMap"].data["cuslice.yaml"])


def test_the_configmaps_yaml_has_the_schedulers_format(tenant_config):
    assert set(tenant_config) == {"scheduler", "tenants"}
    assert tenant_config["scheduler"]["quantum"] == "100ms"
    assert len(tenant_config["tenants"]) >= 2
    for tenant in tenant_config["tenants"]:
        assert set(tenant) <= {"name", "priority", "memory", "compute", "match", "allow_env"}
        assert tenant["priority"] in ("high", "normal", "low")
        assert set(tenant["compute"]) <= {"share", "limit"}
        assert isinstance(tenant["match"]["uid"], int)


def test_the_example_pod_is_a_tenant_of_the_configmap(objects, tenant_config):
    pod = objects["Pod"].spec
    [container] = pod.containers
    env = {e.name: e.value for e in container.env}
    [tenant] = [t for t in tenant_config["tenants"] if t["name"] == env["CUSLICE_TENANT"]]
    assert pod.security_context.run_as_user == tenant["match"]["uid"]
    assert container.resources.limits["nvidia.com/gpu"] == "1"


def test_the_example_pod_mounts_what_the_daemonset_installs(objects):
    pod = objects["Pod"].spec
    volumes = host_paths(pod)
    assert {"/opt/cuslice", "/run/cuslice", "/dev/shm/cuslice"} <= set(volumes)
    assert volumes["/dev/shm/cuslice"].host_path.type == "File"
    [container] = pod.containers
    mounts = mounts_of(container)
    assert mounts[volumes["/opt/cuslice"].name].read_only
    assert mounts[volumes["/dev/shm/cuslice"].name].mount_path == "/dev/shm/cuslice"
    env = {e.name: e.value for e in container.env}
    hook_mount = mounts[volumes["/opt/cuslice"].name].mount_path
    assert env["CUSLICE_HOOK_PATH"] == f"{hook_mount}/lib/libcuslice.so"
    # The wrapper sets LD_PRELOAD; a pod-level value would replace the image's.
    assert "LD_PRELOAD" not in env
    assert container.command[0] == f"{hook_mount}/bin/cuslice-entrypoint.sh"
