"""What the device plugin's end-to-end tests share: a node made of the real cuslice-scheduler,
the real cuslice-device-plugin on the fake NVML, and a fake kubelet (fake_kubelet.cpp) that
speaks the kubelet's Device Plugin and PodResources APIs over Unix sockets; `cuslice status
--json` and the scheduler's list of plugin tenants say what the tenants are.

Waits are bounded polls that return as soon as the condition holds.
"""
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import urllib.request

import pytest

sys.path.insert(0, os.environ.get("CUSLICE_HARNESS_DIR", ""))
from scheduler_harness import DEADLINE, Scheduler, built, free_port, unique_shm_name  # noqa: E402

GiB = 1 << 30
MEMORY = "cuslice.io/gpu-memory"
COMPUTE = "cuslice.io/gpu-compute"
CONFIG = "scheduler:\n  quantum: 50ms\ntenants: []\n"

# The control socket's list of plugin tenants (protocol/socket_protocol.h: PluginRequest,
# PluginList, PluginTenant), little-endian as on every machine the tests run on.
PLUGIN_MAGIC = 0x50434C43
PLUGIN_VERSION = 2
PLUGIN_LIST = 3
PLUGIN_REQUEST = struct.Struct("<IHHII")  # magic, version, size, command, reserved; then a tenant
PLUGIN_LIST_HEAD = struct.Struct("<IHHiI256s")  # magic, version, size, status, count, message
# name, key, gpu, priority, share_ppm, limit_ppm, memory_bytes, gpu_uuid, units, namespace,
# pod, container, gpu_mask, reserved
PLUGIN_TENANT = struct.Struct("<64s64sIIIIQ48s64s64s256s64sII")


def cli_status(scheduler):
    """`cuslice status --json` of `scheduler` (a NodeScheduler)."""
    out = subprocess.run(
        [str(built("CUSLICE_CLI_BIN")), "status", "--json", "--socket", str(scheduler.socket),
         "--shm-name", scheduler.shm_name],
        capture_output=True, text=True, timeout=DEADLINE)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def plugin_tenant_records(scheduler):
    """The plugin tenants `scheduler` lists on its control socket, as PLUGIN_TENANT tuples."""
    request = PLUGIN_REQUEST.pack(PLUGIN_MAGIC, PLUGIN_VERSION, PLUGIN_REQUEST.size + PLUGIN_TENANT.size, PLUGIN_LIST, 0)
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(DEADLINE)
        s.connect(str(scheduler.control_socket))
        s.send(request + bytes(PLUGIN_TENANT.size))
        reply = s.recv(1 << 20)
    magic, _, _, status, count, message = PLUGIN_LIST_HEAD.unpack_from(reply)
    assert magic == PLUGIN_MAGIC and status == 0, message
    return [PLUGIN_TENANT.unpack_from(reply, PLUGIN_LIST_HEAD.size + i * PLUGIN_TENANT.size) for i in range(count)]


class LineDriven:
    """A test program driven line by line: JSON in on stdin, JSON out on stdout. It says
    {"ready": true} first, and ends on {"cmd": "quit"}."""

    def __init__(self, argv):
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        assert json.loads(self.process.stdout.readline())["ready"]

    def __call__(self, cmd, **args):
        self.process.stdin.write(json.dumps({"cmd": cmd, **args}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, f"{self.process.args[0]} died: {self.process.stderr.read()}"
        return json.loads(line)

    def ok(self, cmd, **args):
        answer = self(cmd, **args)
        assert answer["ok"], answer
        return answer

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.write('{"cmd":"quit"}\n')
            self.process.stdin.close()
            try:
                self.process.wait(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class Kubelet(LineDriven):
    def __init__(self, plugin_dir, pod_socket):
        super().__init__([str(built("CUSLICE_FAKE_KUBELET")), "--plugin-dir", str(plugin_dir),
                          "--pod-resources-socket", str(pod_socket)])

    def admit(self, pod, memory=None, compute=None, order=None, pick="preferred", namespace="team-a",
              container="main"):
        requests = {}
        if memory is not None:
            requests[MEMORY] = memory
        if compute is not None:
            requests[COMPUTE] = compute
        spec = {"name": container, "requests": requests}
        if order:
            spec["order"] = order
        return self("admit", namespace=namespace, pod=pod, containers=[spec], pick=pick)


class NodeScheduler(Scheduler):
    """cuslice-scheduler with CONFIG (or the configuration a test left in tmp_path), on
    tmp_path/s.sock, the segment `shm_name` and metrics on 127.0.0.1:`metrics_port`."""

    def __init__(self, tmp_path, shm_name, metrics_port):
        config = tmp_path / "cuslice.yaml"
        super().__init__(tmp_path, config=config.read_text() if config.exists() else CONFIG, shm_name=shm_name,
                         args=("--metrics-port", str(metrics_port), "--metrics-address", "127.0.0.1"))
        self.metrics_port = metrics_port


class NodeParts:
    """What a test node of a kubelet plugin does with its plugin process (`self.plugin`, its
    logs in `self.plugin_logs`) and its scheduler (`self.scheduler`, in `self.tmp`)."""

    def make_dev(self):
        """Device nodes where the plugin looks for them (--dev-root): empty files will do."""
        self.dev = self.tmp / "dev"
        self.dev.mkdir()
        for name in ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"] + [f"nvidia{i}" for i in range(self.gpus)]:
            (self.dev / name).touch()

    def launch_plugin(self, binary, args, default_level):
        """Starts the plugin `binary` (its path's variable) on the fake NVML of `self.gpus` GPUs of
        `self.memory` bytes, with the scheduler's, the hook's and the device nodes' options and
        `args`; its log goes to a file of its own (logs())."""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LD_LIBRARY_PATH": str(built("CUSLICE_FAKE_DRIVER_DIR")),
            "FAKE_CUDA_DEVICE_COUNT": str(self.gpus),
            "FAKE_CUDA_DEVICE_MEMORY": str(self.memory),
        }
        log = self.tmp / f"plugin-{len(self.plugin_logs)}.log"
        self.plugin_logs.append(log)
        self.plugin = subprocess.Popen(
            [str(built(binary)),
             "--scheduler-socket", str(self.scheduler.socket),
             "--shm-name", self.scheduler.shm_name,
             "--hook", str(built("CUSLICE_HOOK_LIB")),
             "--preload-file", str(self.tmp / "state" / "ld.so.preload"),
             "--dev-root", str(self.dev), *args,
             "--log-level", os.environ.get("PLUGIN_LOG_LEVEL", default_level)],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log.open("w"))

    def stop_plugin(self, sig=signal.SIGTERM):
        self.plugin.send_signal(sig)
        self.plugin.wait(timeout=DEADLINE)

    def status(self):
        return cli_status(self.scheduler)

    def tenants(self):
        return {t["name"]: t for t in self.status()["tenants"] if t["state"] == "active"}

    def restart_scheduler(self):
        """Stops the scheduler and starts a new one on the same socket and segment name."""
        self.scheduler.stop()
        self.scheduler = NodeScheduler(self.tmp, self.scheduler.shm_name, self.scheduler.metrics_port).wait_ready()

    def logs(self):
        return "".join(log.read_text() for log in self.plugin_logs)


class Node(NodeParts):
    """A node: scheduler, fake kubelet and plugin, on private sockets and a private segment."""

    # Fast polls and short delays, so that the tests wait less.
    TIMING = ("--poll-interval", "0.1", "--removal-delay", "0.3", "--kubelet-settle", "2", "--unseen-grace", "3")

    def __init__(self, tmp_path, gpus=4, memory=16 * GiB, timing=TIMING, plugin_args=()):
        self.tmp = tmp_path
        self.gpus = gpus
        self.memory = memory
        self.timing = timing
        self.plugin_args = tuple(plugin_args)
        self.plugin_dir = tmp_path / "device-plugins"
        self.pod_socket = tmp_path / "pod-resources" / "kubelet.sock"
        self.make_dev()
        self.scheduler = NodeScheduler(tmp_path, unique_shm_name(), free_port()).wait_ready()
        self.kubelet = Kubelet(self.plugin_dir, self.pod_socket)
        self.plugin = None
        self.plugin_logs = []
        self.start_plugin()

    def start_plugin(self):
        self.launch_plugin("CUSLICE_DEVICE_PLUGIN_BIN",
                           ["--plugin-dir", str(self.plugin_dir), "--pod-resources-socket", str(self.pod_socket),
                            *self.timing, *self.plugin_args], default_level="info")

    def plugin_tenants(self):
        """The scheduler's own record of the plugin's tenants (its control socket's list):
        {name: {"gpu", "share", "limit", "memory_bytes"}}."""
        return {t[0].split(b"\0")[0].decode(): {"gpu": t[2], "share": t[4] / 1e6, "limit": t[5] / 1e6,
                                                 "memory_bytes": t[6]}
                for t in plugin_tenant_records(self.scheduler)}

    def labels(self, tenant):
        """The namespace/pod/container labels of the tenant's metrics ({} while it has none)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.scheduler.metrics_port}/metrics", timeout=DEADLINE) as r:
            text = r.read().decode()
        for line in text.splitlines():
            if f'tenant="{tenant}"' in line and "namespace=" in line:
                return dict(re.findall(r'(namespace|pod|container)="([^"]*)"', line))
        return {}

    def close(self):
        self.kubelet.close()
        if self.plugin and self.plugin.poll() is None:
            self.stop_plugin()
        self.scheduler.stop()


@pytest.fixture
def make_node(tmp_path):
    made = []

    def make(**kwargs):
        node = Node(tmp_path, **kwargs)
        made.append(node)
        node.kubelet.ok("wait_registered", resource=MEMORY)
        node.kubelet.ok("wait_registered", resource=COMPUTE)
        return node

    yield make
    for node in made:
        node.close()


def gpu_of(device_id):
    return device_id.rsplit("-m", 1)[0]


def tenant_env(allocation):
    return allocation["containers"]["main"][MEMORY]["envs"]


def tenant_name(allocation):
    return tenant_env(allocation)["CUSLICE_TENANT"].split(":")[0]


def healthy_count(node, resource):
    devices = node.kubelet.ok("devices", resource=resource)["devices"]
    return sum(h == "Healthy" for h in devices.values())


