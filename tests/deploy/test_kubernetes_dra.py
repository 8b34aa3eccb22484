"""deploy/kubernetes/dra: the DRA driver's manifests are valid API objects and fit together.

No cluster: the DaemonSet, ServiceAccount and RBAC objects round-trip through the Kubernetes
client's models (a field the model does not know is dropped, so a misspelt one shows); the
DeviceClasses and ResourceClaimTemplates are checked against the resource.k8s.io/v1 schema the
driver's tests use (tests/dra_plugin/resource_v1_schema.json), with unknown fields refused.
"""
import json
import sys
from pathlib import Path

import kubernetes.client
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent.parent / "dra_plugin"))
from api_server import schema_errors  # noqa: E402
from test_kubernetes import EXAMPLE_IMAGE_GLIBC  # noqa: E402

MODELS = {
    ("v1", "Namespace"): "V1Namespace",
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "ResourceQuota"): "V1ResourceQuota",
    ("apps/v1", "DaemonSet"): "V1DaemonSet",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "V1ClusterRole",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "V1ClusterRoleBinding",
}
RESOURCE_KINDS = {"DeviceClass", "ResourceClaimTemplate"}


class _Response:
    def __init__(self, document):
        self.data = json.dumps(document)


@pytest.fixture(scope="module")
def documents(deploy_dir):
    found = []
    for path in sorted((deploy_dir / "kubernetes" / "dra").glob("*.yaml")):
        if path.name != "kustomization.yaml":
            found += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    assert found
    return found


def of_kind(documents, kind):
    return [d for _, d in documents if d["kind"] == kind]


def test_every_object_is_valid_for_its_api(documents):
    client = kubernetes.client.ApiClient()
    for name, doc in documents:
        key = (doc["apiVersion"], doc["kind"])
        if doc["kind"] in RESOURCE_KINDS:
            assert doc["apiVersion"] == "resource.k8s.io/v1", name
            assert schema_errors(doc, doc["kind"]) == [], name
        elif doc["kind"] != "Pod":  # the client's Pod predates resourceClaims: checked below
            assert key in MODELS, f"{name}: unexpected {key}"
            model = client.deserialize(_Response(doc), MODELS[key])
            assert client.sanitize_for_serialization(model) == doc, name


def test_the_schema_check_catches_a_misspelt_field(documents):
    template = json.loads(json.dumps(of_kind(documents, "ResourceClaimTemplate")[0]))
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacty"] = {}
    assert schema_errors(template, "ResourceClaimTemplate")


def test_the_role_grants_only_what_the_driver_does(documents):
    [role] = of_kind(documents, "ClusterRole")
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"]) for r in role["rules"]}
    assert rules == {(("resource.k8s.io",), ("resourceslices",)): {"get", "list", "watch", "create", "update"},
                     (("resource.k8s.io",), ("resourceclaims",)): {"get"},
                     (("",), ("nodes",)): {"get"}}
    [binding] = of_kind(documents, "ClusterRoleBinding")
    [account] = of_kind(documents, "ServiceAccount")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": "cuslice-system"}]


def test_the_daemonset_gives_the_plugin_the_kubelets_directories_and_its_node(documents):
    [ds] = of_kind(documents, "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    [account] = of_kind(documents, "ServiceAccount")
    assert spec["serviceAccountName"] == account["metadata"]["name"]
    assert spec.get("automountServiceAccountToken", True) and account["automountServiceAccountToken"]
    assert spec["nodeSelector"]["cuslice.io/dra"] == "true"
    plugin = next(c for c in spec["containers"] if c["name"] == "dra-plugin")
    command = plugin["command"]
    flag = {command[i]: command[i + 1] for i in range(1, len(command) - 1) if command[i].startswith("--")}
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    mounted = {host[m["name"]]: m["mountPath"] for m in plugin["volumeMounts"] if m["name"] in host}
    # Every path the plugin writes or names to the kubelet and the runtime is the node's own.
    for option in ("--plugin-dir", "--registry-dir", "--cdi-dir", "--preload-file", "--hook"):
        path = flag[option]
        assert any(path.startswith(h) and mounted[h] == h for h in mounted), option
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in plugin["env"]
    assert plugin["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert not plugin["securityContext"].get("privileged")
    assert "/run/cuslice-control" in mounted and "/run/cuslice" in mounted


def test_the_examples_pods_use_the_claims_of_the_templates(documents):
    templates = {t["metadata"]["name"]: t for t in of_kind(documents, "ResourceClaimTemplate")}
    classes = {c["metadata"]["name"] for c in of_kind(documents, "DeviceClass")}
    pods = of_kind(documents, "Pod")
    assert len(pods) == 3 and len(templates) == 3
    for pod in pods:
        claims = {c["name"]: c["resourceClaimTemplateName"] for c in pod["spec"]["resourceClaims"]}
        assert set(claims.values()) <= set(templates)
        for c in pod["spec"]["containers"]:
            assert {x["name"] for x in c["resources"]["claims"]} <= set(claims)
        assert "volumes" not in pod["spec"] and pod["spec"]["securityContext"]["runAsNonRoot"]
        for c in pod["spec"]["containers"]:  # the hook needs glibc 2.28 or newer
            assert EXAMPLE_IMAGE_GLIBC.get(c["image"], (0, 0)) >= (2, 28), c["image"]
    for t in templates.values():
        for r in t["spec"]["spec"]["devices"]["requests"]:
            assert r["exactly"]["deviceClassName"] in classes
            assert set(r["exactly"]["capacity"]["requests"]) == {"memory", "compute"}


def test_the_kustomization_installs_every_manifest_but_the_examples(deploy_dir):
    dra = deploy_dir / "kubernetes" / "dra"
    kustomization = yaml.safe_load((dra / "kustomization.yaml").read_text())
    manifests = {p.name for p in dra.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == manifests - {"example-claims.yaml"}
