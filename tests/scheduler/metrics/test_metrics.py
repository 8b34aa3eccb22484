"""The daemon's Prometheus endpoint, scraped over HTTP from 127.0.0.1 while processes that
play hooked applications use the GPU, and parsed as Prometheus would parse it."""
import re
import urllib.error
import urllib.request

import pytest

from scheduler_harness import FakeProcess, Scheduler, eventually, free_port

GiB = 1 << 30
UUID_HEX = "00112233445566778899aabbccddeeff"
UUID = "GPU-00112233-4455-6677-8899-aabbccddeeff"
CONFIG = """\
tenants:
  - {name: train, allow_env: true, memory: 2GiB, compute: {share: 60%, limit: 80%}}
  - {name: serve, allow_env: true, priority: high, compute: {share: 40%}}
"""

# Every family the endpoint promises, with its type.
REQUIRED = {
    "cuslice_tenant_memory_used_bytes": "gauge",
    "cuslice_tenant_memory_quota_bytes": "gauge",
    "cuslice_tenant_gpu_seconds_total": "counter",
    "cuslice_tenant_token_wait_seconds_total": "counter",
    "cuslice_tenant_token_grants_total": "counter",
    "cuslice_tenant_oom_refusals_total": "counter",
    "cuslice_tenant_achieved_share_ratio": "gauge",
    "cuslice_tenant_token_held": "gauge",
    "cuslice_tenant_processes": "gauge",
    "cuslice_tenant_share_ratio": "gauge",
    "cuslice_tenant_limit_ratio": "gauge",
    "cuslice_gpu_token_handoffs_total": "counter",
    "cuslice_gpu_memory_total_bytes": "gauge",
    "cuslice_tenant_preemption_moved_bytes_total": "counter",
    "cuslice_tenant_suspended": "gauge",
    "cuslice_tenant_suspensions_total": "counter",
    "cuslice_tenant_suspended_seconds_total": "counter",
    "cuslice_tenant_suspend_seconds_total": "counter",
    "cuslice_tenant_resume_seconds_total": "counter",
}

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')


def parse(text):
    """{family: type}, and [(name, {label: value}, float)] — rejecting any malformed line."""
    types, samples = {}, []
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name not in types, f"{name} typed twice"
            types[name] = kind
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        name, labels, value = m.groups()
        assert name in types, f"{name} sampled before its TYPE"
        parsed = dict(LABEL.findall(labels))
        assert ",".join(f'{k}="{v}"' for k, v in parsed.items()) == labels, line
        samples.append((name, parsed, float(value)))
    return types, samples


def scrape(port, path="/metrics"):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return response.status, response.headers.get("Content-Type"), response.read().decode()


def value(samples, name, **labels):
    found = [v for n, l, v in samples if n == name and l == labels]
    assert len(found) == 1, f"{name}{labels}: {found}"
    return found[0]


@pytest.fixture
def port():
    return free_port()


@pytest.fixture
def scheduler(tmp_path, port):
    s = Scheduler(tmp_path, config=CONFIG, args=("--metrics-port", str(port),
                                                 "--metrics-address", "127.0.0.1")).wait_ready()
    yield s
    s.stop()


def test_every_family_is_served_with_its_type_and_no_pid_label(scheduler, port):
    procs = [
        FakeProcess(scheduler.socket, "train", "--memory-total", 16 * GiB, "--uuid", UUID_HEX,
                    "--reserve", GiB, "--over-quota", 4 * GiB, "--gpu-time-ms", 250),
        FakeProcess(scheduler.socket, "serve", "--hold"),
    ]
    procs.append(FakeProcess(scheduler.socket, "train", "--wait"))  # blocked behind serve
    try:
        status, content_type, text = scrape(port)
        assert status == 200
        assert content_type.startswith("text/plain; version=0.0.4")
        types, samples = parse(text)
        for name, kind in REQUIRED.items():
            assert types.get(name) == kind, name
        assert all("pid" not in labels for _, labels, _ in samples)
        assert {n for n, _, _ in samples} <= set(types)

        train = {"tenant": "train", "gpu": UUID}
        assert value(samples, "cuslice_tenant_memory_used_bytes", **train) == GiB
        assert value(samples, "cuslice_tenant_memory_quota_bytes", **train) == 2 * GiB
        assert value(samples, "cuslice_tenant_gpu_seconds_total", **train) == pytest.approx(0.25)
        assert value(samples, "cuslice_tenant_oom_refusals_total", **train) == 1
        assert value(samples, "cuslice_tenant_token_grants_total", **train) >= 1
        assert value(samples, "cuslice_tenant_token_held", tenant="serve", gpu=UUID) == 1
        assert value(samples, "cuslice_tenant_processes", tenant="train") == 2
        assert value(samples, "cuslice_tenant_share_ratio", tenant="train") == pytest.approx(0.6)
        assert value(samples, "cuslice_tenant_limit_ratio", tenant="train") == pytest.approx(0.8)
        assert value(samples, "cuslice_tenant_limit_ratio", tenant="serve") == 1
        assert value(samples, "cuslice_gpu_memory_total_bytes", gpu=UUID) == 16 * GiB
        assert value(samples, "cuslice_gpu_token_handoffs_total", gpu=UUID) >= 2
        ratio = value(samples, "cuslice_tenant_achieved_share_ratio", **train)
        assert 0 <= ratio <= 1
        # The waiting process's time shows while it waits.
        eventually(lambda: value(parse(scrape(port)[2])[1], "cuslice_tenant_token_wait_seconds_total",
                                 **train) > 0, "token wait time")
    finally:
        for p in procs:
            p.close()


def test_healthz_and_nothing_else(scheduler, port):
    assert scrape(port, "/healthz")[0] == 200
    with pytest.raises(urllib.error.HTTPError) as e:
        scrape(port, "/")
    assert e.value.code == 404


def test_the_port_can_come_from_the_configuration_file(tmp_path, port):
    s = Scheduler(tmp_path, config=f"scheduler: {{metrics_port: {port}}}\n" + CONFIG).wait_ready()
    try:
        eventually(lambda: scrape(port)[0] == 200, "metrics from the file's port")
    finally:
        s.stop()


def test_metrics_are_off_by_default(tmp_path):
    s = Scheduler(tmp_path, config=CONFIG).wait_ready()
    assert "serving metrics" not in s.stop()


def test_a_port_in_use_stops_the_daemon_with_a_message(tmp_path, port):
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        s = Scheduler(tmp_path, config=CONFIG, args=("--metrics-port", str(port),
                                                     "--metrics-address", "127.0.0.1"))
        assert s.process.wait(timeout=15) == 1
        assert f"cannot serve metrics on 127.0.0.1:{port}" in s.stop()


def test_the_pods_workload_labels_the_tenant_when_its_processes_agree(scheduler, port):
    pod = {"CUSLICE_POD_NAMESPACE": "ml", "CUSLICE_POD_NAME": "trainer-0", "CUSLICE_CONTAINER_NAME": "main"}
    procs = [FakeProcess(scheduler.socket, "train", env=pod),
             FakeProcess(scheduler.socket, "train", env=dict(pod, CUSLICE_CONTAINER_NAME="sidecar")),
             FakeProcess(scheduler.socket, "serve")]
    try:
        def labels_of(tenant):
            [labels] = [l for n, l, _ in parse(scrape(port)[2])[1]
                        if n == "cuslice_tenant_processes" and l["tenant"] == tenant]
            return labels
        # The two processes of train share namespace and pod, not the container; serve's
        # environment names no workload.
        eventually(lambda: labels_of("train") == {"tenant": "train", "namespace": "ml", "pod": "trainer-0"},
                   "workload labels")
        assert labels_of("serve") == {"tenant": "serve"}
    finally:
        for p in procs:
            p.close()

