"""deploy/kubernetes: every manifest is a valid API object, and the pieces fit together.

No cluster: each document is deserialized into the Kubernetes client's model of its kind and
serialized back. The client's models drop fields they do not know, so a document that does
not come back unchanged has a misspelt or misplaced field.
"""
import json
import os
import re
import shutil
import socket
import subprocess

import kubernetes.client
import pytest
import yaml

MODELS = {
    ("v1", "Namespace"): "V1Namespace",
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Pod"): "V1Pod",
    ("apps/v1", "DaemonSet"): "V1DaemonSet",
    ("v1", "ResourceQuota"): "V1ResourceQuota",
}
KUSTOMIZATION = "kustomization.yaml"


class _Response:
    """What ApiClient.deserialize reads: an HTTP response's body."""

    def __init__(self, document):
        self.data = json.dumps(document)


@pytest.fixture(scope="module")
def documents(deploy_dir):
    found = []
    for path in sorted((deploy_dir / "kubernetes").glob("*.yaml")):
        if path.name != KUSTOMIZATION:
            found += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    assert found, "no manifests in deploy/kubernetes"
    return found


@pytest.fixture(scope="module")
def objects(documents):
    """{kind: model} for the one object of each kind; {"Pod": [models]} for the examples."""
    client = kubernetes.client.ApiClient()
    by_kind = {"Pod": []}
    for name, doc in documents:
        key = (doc.get("apiVersion"), doc.get("kind"))
        assert key in MODELS, f"{name}: unexpected {key}"
        model = client.deserialize(_Response(doc), MODELS[key])
        if doc["kind"] == "Pod":
            by_kind["Pod"].append(model)
            continue
        assert doc["kind"] not in by_kind, f"{name}: a second {doc['kind']}"
        by_kind[doc["kind"]] = model
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
    return {v.host_path.path: v for v in pod_spec.volumes or [] if v.host_path}


def mounts_of(container):
    return {m.name: m for m in container.volume_mounts}


def containers(objects):
    return {c.name: c for c in objects["DaemonSet"].spec.template.spec.containers}


def flag(container, name):
    command = container.command
    return command[command.index(name) + 1]


def test_the_daemonset_runs_the_scheduler_and_the_device_plugin_on_gpu_nodes(objects):
    spec = objects["DaemonSet"].spec.template.spec
    assert spec.node_selector == {"nvidia.com/gpu.present": "true"}
    assert any(t.key == "nvidia.com/gpu" and t.operator == "Exists" for t in spec.tolerations)
    assert spec.host_pid  # tenants' pids as the host sees them
    c = containers(objects)
    assert set(c) == {"scheduler", "device-plugin"}
    assert c["scheduler"].command[0] == "/usr/local/bin/cuslice-scheduler"
    assert c["device-plugin"].command[0] == "/usr/local/bin/cuslice-device-plugin"


def test_nothing_runs_privileged_and_only_the_scheduler_has_a_capability(objects):
    spec = objects["DaemonSet"].spec.template.spec
    for c in spec.init_containers + spec.containers:
        sc = c.security_context
        assert not sc.privileged, c.name
        assert sc.allow_privilege_escalation is False, c.name
        assert sc.capabilities.drop == ["ALL"], c.name
        # KILL, for the usage watchdog's `on_violation: kill`; nothing for anybody else.
        assert (sc.capabilities.add or []) == (["KILL"] if c.name == "scheduler" else []), c.name
        assert sc.read_only_root_filesystem, c.name


def test_the_scheduler_has_what_its_usage_watchdog_needs(objects):
    spec = objects["DaemonSet"].spec.template.spec
    assert spec.host_pid  # NVML's pids are the host's; so must be the ones it signals
    scheduler = containers(objects)["scheduler"]
    env = {e.name: e.value for e in scheduler.env}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"  # NVML, from the NVIDIA container runtime
    assert "utility" in env["NVIDIA_DRIVER_CAPABILITIES"].split(",")
    assert "KILL" in scheduler.security_context.capabilities.add


def test_a_service_account_of_its_own_with_no_token(objects):
    account = objects["ServiceAccount"]
    spec = objects["DaemonSet"].spec.template.spec
    assert spec.service_account_name == account.metadata.name
    assert account.automount_service_account_token is False
    assert spec.automount_service_account_token is False
    assert account.metadata.namespace == objects["DaemonSet"].metadata.namespace


def test_the_scheduler_shares_its_socket_and_segment_through_host_paths(objects):
    spec = objects["DaemonSet"].spec.template.spec
    volumes = host_paths(spec)
    assert {"/opt/cuslice", "/run/cuslice", "/dev/shm"} <= set(volumes)
    scheduler = containers(objects)["scheduler"]
    mounts = mounts_of(scheduler)
    assert mounts[volumes["/run/cuslice"].name].mount_path == "/run/cuslice"
    assert mounts[volumes["/dev/shm"].name].mount_path == "/dev/shm"
    env = {e.name: e.value for e in scheduler.env}
    assert env["CUSLICE_SOCKET"].startswith("/run/cuslice/")
    [installer] = spec.init_containers
    assert mounts_of(installer)[volumes["/opt/cuslice"].name].mount_path == "/host/opt/cuslice"


def test_the_device_plugin_sees_every_path_it_gives_the_kubelet_where_the_node_has_it(objects):
    """The kubelet mounts the plugin's host paths into containers: the plugin must see each at
    the same path, through a hostPath volume of that path or a folder above it."""
    spec = objects["DaemonSet"].spec.template.spec
    volumes = {v.name: v for v in spec.volumes}
    plugin = containers(objects)["device-plugin"]
    same_place = {}
    for m in plugin.volume_mounts:
        source = volumes[m.name].host_path
        if source is not None and source.path == m.mount_path:
            same_place[m.mount_path] = m
    scheduler = containers(objects)["scheduler"]

    def seen(path):
        return any(path == root or path.startswith(root + "/") for root in same_place)
    for name in ("--hook", "--preload-file", "--scheduler-socket", "--plugin-dir", "--pod-resources-socket"):
        assert seen(flag(plugin, name)), f"{name} {flag(plugin, name)}"
    assert seen("/dev/shm" + flag(plugin, "--shm-name"))
    assert same_place["/opt/cuslice"].read_only
    # The scheduler the plugin talks to is the one this pod runs.
    assert flag(plugin, "--scheduler-socket") == {e.name: e.value for e in scheduler.env}["CUSLICE_SOCKET"]
    assert flag(plugin, "--hook") == "/opt/cuslice/lib/libcuslice.so"  # where install-hook puts it
    assert flag(plugin, "--plugin-dir") == "/var/lib/kubelet/device-plugins"
    assert flag(plugin, "--pod-resources-socket") == "/var/lib/kubelet/pod-resources/kubelet.sock"
    env = {e.name: e.value for e in plugin.env}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"  # NVML


def test_the_control_socket_reaches_the_scheduler_and_the_plugin_but_no_tenant(objects):
    spec = objects["DaemonSet"].spec.template.spec
    volumes = {v.name: v for v in spec.volumes}
    scheduler, plugin = containers(objects)["scheduler"], containers(objects)["device-plugin"]
    env = {e.name: e.value for e in scheduler.env}
    control, socket = env["CUSLICE_CONTROL_SOCKET"], env["CUSLICE_SOCKET"]
    assert flag(plugin, "--scheduler-control-socket") == control
    control_dir, socket_dir = control.rsplit("/", 1)[0], socket.rsplit("/", 1)[0]
    # Allocate mounts the socket's directory into every tenant container: the control socket
    # must not be in it nor below it.
    assert control_dir != socket_dir and not control_dir.startswith(socket_dir + "/")
    for c in (scheduler, plugin):
        [mount] = [m for m in c.volume_mounts if m.mount_path == control_dir]
        assert volumes[mount.name].host_path.path == control_dir, c.name
    [installer] = spec.init_containers
    assert not any(m.mount_path.startswith(control_dir) for m in installer.volume_mounts)


def test_the_daemonset_exposes_metrics_and_probes_them(objects):
    scheduler = containers(objects)["scheduler"]
    [port] = [p for p in scheduler.ports if p.name == "metrics"]
    assert port.container_port == 9400
    # Metrics are off unless asked for, on the port the container declares.
    assert flag(scheduler, "--metrics-port") == "9400"
    probe = scheduler.liveness_probe
    assert probe is not None and probe.http_get.port == "metrics"
    assert probe.http_get.path == "/healthz"


def test_the_scheduler_reads_and_watches_the_configmaps_file(objects):
    spec = objects["DaemonSet"].spec.template.spec
    [config_volume] = [v for v in spec.volumes if v.config_map]
    assert config_volume.config_map.name == objects["ConfigMap"].metadata.name
    scheduler = containers(objects)["scheduler"]
    config_path = flag(scheduler, "--config")
    mount = mounts_of(scheduler)[config_volume.name]
    assert mount.sub_path is None  # a subPath mount would never see the ConfigMap change
    assert config_path.rsplit("/", 1) == [mount.mount_path, "cuslice.yaml"]
    assert "cuslice.yaml" in objects["ConfigMap"].data
    assert "--watch-config" in scheduler.command  # changes apply without kubectl exec


def test_the_configmaps_file_is_valid_for_the_scheduler(objects, tmp_path):
    build = os.environ.get("CUSLICE_BUILD_DIR")
    if not build:
        pytest.fail("CUSLICE_BUILD_DIR is not set: run these tests through ctest, which sets it")
    path = tmp_path / "cuslice.yaml"
    path.write_text(objects["ConfigMap"].data["cuslice.yaml"])
    check = subprocess.run([f"{build}/cli/cuslice", "config", "check", str(path)],
                           capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    assert yaml.safe_load(objects["ConfigMap"].data["cuslice.yaml"])["tenants"] == []


def baseline_violations(pod):
    """The Pod Security Standards' "baseline" and "restricted" rules an example could break."""
    spec = pod.spec
    found = []
    if spec.host_network or spec.host_pid or spec.host_ipc:
        found.append("host namespaces")
    if any(v.host_path for v in spec.volumes or []):
        found.append("hostPath volume")
    psc = spec.security_context
    if not (psc and psc.run_as_non_root):
        found.append("restricted: runAsNonRoot")
    if not (psc and psc.seccomp_profile and psc.seccomp_profile.type == "RuntimeDefault"):
        found.append("restricted: seccompProfile")
    for c in (spec.init_containers or []) + spec.containers:
        sc = c.security_context
        if sc is None or sc.privileged or sc.allow_privilege_escalation is not False:
            found.append(f"{c.name}: privileged or escalation")
        if sc is None or sc.capabilities is None or sc.capabilities.drop != ["ALL"] or sc.capabilities.add:
            found.append(f"{c.name}: capabilities")
        if any(p.host_port for p in c.ports or []):
            found.append(f"{c.name}: hostPort")
    return found


def test_the_examples_ask_for_fractions_and_pass_pod_security(objects):
    pods = objects["Pod"]
    assert len(pods) >= 2
    for pod in pods:
        assert baseline_violations(pod) == [], pod.metadata.name
        [c] = pod.spec.containers
        limits = c.resources.limits
        assert int(limits["cuslice.io/gpu-memory"]) > 0 and 0 < int(limits["cuslice.io/gpu-compute"]) <= 100
        assert "nvidia.com/gpu" not in limits
        assert not any(e.name.startswith("CUSLICE_") or e.name == "LD_PRELOAD" for e in c.env or [])
    shares = sum(int(p.spec.containers[0].resources.limits["cuslice.io/gpu-compute"]) for p in pods)
    assert shares <= 100  # the two fit one GPU


def test_the_policy_check_catches_a_hostpath(documents):
    _, doc = next((n, d) for n, d in documents if d["kind"] == "Pod")
    broken = json.loads(json.dumps(doc))
    broken["spec"]["volumes"] = [{"name": "x", "hostPath": {"path": "/opt/cuslice"}}]
    pod = kubernetes.client.ApiClient().deserialize(_Response(broken), "V1Pod")
    assert "hostPath volume" in baseline_violations(pod)


def test_the_kustomization_installs_every_manifest_but_the_examples(deploy_dir):
    kustomization = yaml.safe_load((deploy_dir / "kubernetes" / KUSTOMIZATION).read_text())
    assert kustomization["kind"] == "Kustomization"
    manifests = {p.name for p in (deploy_dir / "kubernetes").glob("*.yaml")} - {KUSTOMIZATION}
    assert set(kustomization["resources"]) == manifests - {"example-pods.yaml"}
    [image] = kustomization["images"]
    assert image["name"] == "registry.example.com/cuslice"


def test_the_kustomization_names_the_registry_and_the_tag_of_every_image(deploy_dir, objects):
    """docs/reference/kubernetes.md says to set the registry in `images:`: newName replaces the
    repository of every container that names the image, newTag its tag."""
    [image] = yaml.safe_load((deploy_dir / "kubernetes" / KUSTOMIZATION).read_text())["images"]
    assert set(image) == {"name", "newName", "newTag"}
    assert image["newName"] and "/" in image["newName"] and ":" not in image["newName"].rsplit("/", 1)[1]
    assert re.fullmatch(r"[\w][\w.-]{0,127}", str(image["newTag"]))
    spec = objects["DaemonSet"].spec.template.spec
    for c in spec.init_containers + spec.containers:
        repository, _, tag = c.image.rpartition(":")
        assert repository == image["name"], f"{c.name}: {c.image} is not {image['name']}: newName misses it"
        assert tag == str(image["newTag"]), f"{c.name}: {c.image}"


def test_kustomize_puts_the_registry_set_in_images_into_every_container(deploy_dir, tmp_path):
    """What docs/reference/kubernetes.md tells users to do, done with the kustomize in kubectl."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl here")
    folder = tmp_path / "kubernetes"
    shutil.copytree(deploy_dir / "kubernetes", folder)
    kustomization = yaml.safe_load((folder / KUSTOMIZATION).read_text())
    kustomization["images"][0].update(newName="123456789012.dkr.ecr.us-east-1.amazonaws.com/cuslice",
                                      newTag="9.9.9")
    (folder / KUSTOMIZATION).write_text(yaml.safe_dump(kustomization))
    built = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    docs = [d for d in yaml.safe_load_all(built.stdout) if d]
    assert {d["kind"] for d in docs} >= {"Namespace", "ResourceQuota", "DaemonSet"}
    [daemonset] = [d for d in docs if d["kind"] == "DaemonSet"]
    spec = daemonset["spec"]["template"]["spec"]
    images = {c["image"] for c in spec["initContainers"] + spec["containers"]}
    assert images == {"123456789012.dkr.ecr.us-east-1.amazonaws.com/cuslice:9.9.9"}


# ---------------------------------------------------------------------------------------------
# Priority classes and the quota that admits them


def kustomized(deploy_dir):
    """The documents `kubectl apply -k` creates, with the kustomization's namespace if it sets one."""
    folder = deploy_dir / "kubernetes"
    kustomization = yaml.safe_load((folder / KUSTOMIZATION).read_text())
    out = []
    for name in kustomization["resources"]:
        for doc in yaml.safe_load_all((folder / name).read_text()):
            if doc:
                if "namespace" in kustomization:
                    doc.setdefault("metadata", {})["namespace"] = kustomization["namespace"]
                out.append(doc)
    return out


def pod_spec_of(doc):
    if doc["kind"] == "Pod":
        return doc["spec"]
    if doc["kind"] in ("DaemonSet", "Deployment", "StatefulSet", "ReplicaSet", "Job"):
        return doc["spec"]["template"]["spec"]
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return None


def scope_matches(requirement, priority_class):
    """A ResourceQuota scope selector's requirement against a pod of that priority class."""
    name, operator = requirement["scopeName"], requirement["operator"]
    assert name == "PriorityClass", f"a scope {name}: not one this check knows"
    values = requirement.get("values") or []
    return {"In": priority_class in values, "NotIn": priority_class not in values,
            "Exists": True, "DoesNotExist": False}[operator]


def uncovered_priority_classes(docs):
    """(kind/name, class, namespace) of every pod template whose priority class is used outside
    kube-system without a ResourceQuota in its namespace that counts pods and whose scope
    selector matches the class, as GKE requires (the quota admission plugin's limitedResources:
    it admits the pod only if such a quota exists)."""
    quotas = [d for d in docs if d["kind"] == "ResourceQuota"]
    problems = []
    for doc in docs:
        spec = pod_spec_of(doc)
        if not spec or not spec.get("priorityClassName"):
            continue
        cls, ns = spec["priorityClassName"], doc["metadata"].get("namespace", "default")
        if ns == "kube-system":
            continue
        covered = any(
            q["metadata"].get("namespace", "default") == ns
            and ({"pods", "count/pods"} & set((q["spec"].get("hard") or {})))
            and (q["spec"].get("scopeSelector") or {}).get("matchExpressions")
            and all(scope_matches(r, cls) for r in q["spec"]["scopeSelector"]["matchExpressions"])
            for q in quotas)
        if not covered:
            problems.append((f"{doc['kind']}/{doc['metadata']['name']}", cls, ns))
    return problems


def test_every_priority_class_outside_kube_system_is_admitted_by_a_quota(deploy_dir):
    docs = kustomized(deploy_dir)
    assert any((pod_spec_of(d) or {}).get("priorityClassName") for d in docs)
    assert uncovered_priority_classes(docs) == []
    [quota] = [d for d in docs if d["kind"] == "ResourceQuota"]
    [namespace] = [d for d in docs if d["kind"] == "Namespace"]
    assert quota["metadata"]["namespace"] == namespace["metadata"]["name"]


def test_the_quota_check_catches_a_class_or_namespace_the_quota_does_not_name(deploy_dir):
    docs = kustomized(deploy_dir)
    [daemonset] = [d for d in docs if d["kind"] == "DaemonSet"]
    assert uncovered_priority_classes([d for d in docs if d["kind"] != "ResourceQuota"]) == [
        ("DaemonSet/cuslice", "system-node-critical", daemonset["metadata"]["namespace"])]
    for change in ("class", "namespace", "hard"):
        broken = json.loads(json.dumps(docs))
        [quota] = [d for d in broken if d["kind"] == "ResourceQuota"]
        if change == "class":
            quota["spec"]["scopeSelector"]["matchExpressions"][0]["values"] = ["system-cluster-critical"]
        elif change == "namespace":
            quota["metadata"]["namespace"] = "default"
        else:
            quota["spec"]["hard"] = {"cpu": "1"}
        assert len(uncovered_priority_classes(broken)) == 1, change


# ---------------------------------------------------------------------------------------------
# The device plugin's probes


def plugin_sockets(deploy_dir, plugin):
    """Where the plugin serves: its --plugin-dir and the endpoint names device_plugin.cpp gives."""
    source = (deploy_dir.parent / "device_plugin" / "device_plugin.cpp").read_text()
    names = re.findall(r'k(?:Memory|Compute)Endpoint = "([^"]+)"', source)
    assert len(names) == 2, names
    return [f"{flag(plugin, '--plugin-dir')}/{n}" for n in names]


def test_the_device_plugin_is_probed_on_the_sockets_it_serves(deploy_dir, objects):
    plugin = containers(objects)["device-plugin"]
    ready, live = plugin.readiness_probe, plugin.liveness_probe
    assert ready is not None and live is not None
    assert ready._exec.command == live._exec.command  # one notion of serving
    script = ready._exec.command[-1]
    for path in plugin_sockets(deploy_dir, plugin):
        directory, name = path.rsplit("/", 1)
        assert name in script and directory in script, path
    # A kubelet restart removes the sockets for a moment: no restart for that.
    assert live.failure_threshold * live.period_seconds >= 30
    assert live.initial_delay_seconds >= 10


def test_the_probe_passes_only_while_both_sockets_are_open(deploy_dir, objects, tmp_path):
    """The probe, run here against sockets in a folder of our own: none, both listening, and
    one whose file outlived its socket (a plugin that died)."""
    plugin = containers(objects)["device-plugin"]
    command = plugin.readiness_probe._exec.command
    sockets = plugin_sockets(deploy_dir, plugin)
    directory = sockets[0].rsplit("/", 1)[0]
    script = command[-1].replace(directory, str(tmp_path))

    def probe():
        return subprocess.run([*command[:-1], script], capture_output=True, timeout=10).returncode

    assert probe() != 0
    opened = []
    for path in sockets:
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(tmp_path / path.rsplit("/", 1)[1]))
        s.listen()
        opened.append(s)
    assert probe() == 0
    opened[1].close()  # the file stays, as a crashed plugin's does
    assert (tmp_path / sockets[1].rsplit("/", 1)[1]).exists()
    assert probe() != 0
    opened[0].close()


# The C library of each example's image: the hook, mounted into the container, needs 2.28 or
# newer (docs/reference/kubernetes.md). An image added to the examples is added here with its glibc.
EXAMPLE_IMAGE_GLIBC = {
    "nvcr.io/nvidia/pytorch:24.05-py3": (2, 35),  # Ubuntu 22.04
}


def test_the_examples_images_have_the_glibc_the_hook_needs(objects):
    for pod in objects["Pod"]:
        for c in pod.spec.containers:
            assert c.image in EXAMPLE_IMAGE_GLIBC, f"{c.image}: which glibc? add it above"
            assert EXAMPLE_IMAGE_GLIBC[c.image] >= (2, 28), c.image


def test_the_dockerfile_builds_from_source_in_stages_on_debian(deploy_dir):
    text = (deploy_dir / "container" / "Dockerfile").read_text()
    stages = re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE)
    assert len(stages) >= 2 and all(s.startswith("debian:") for s in stages), stages
    assert "COPY . /src" in text and "cmake --install" in text
    final = text[text.rindex("\nFROM "):]
    assert "COPY --from=build /install/usr/local/ /usr/local/" in final
    # What the DaemonSet runs comes from the installation into /usr/local.
    assert "CMAKE_INSTALL_PREFIX=/usr/local" in text
