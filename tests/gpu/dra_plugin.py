"""The GPU half of tests/gpu/dra_plugin.sh (which checks the machine and finds cuslice first).

A node made of cuslice-scheduler on a private socket and segment, cuslice-dra-plugin on the
real NVML, the test API server (tests/dra_plugin/api_server.py, in this process) and the DRA
test kubelet (tests/dra_plugin/dra_kubelet.cpp). Checks the published ResourceSlice against the
GPUs nvidia-smi lists, allocates one claim as kube-scheduler would (4 GiB and 30% of GPU 0),
prepares it through the kubelet's DRA API, starts a PyTorch process with exactly what the
claim's CDI spec gives a container (its environment; its mounts as the host paths they name;
the claim's GPUs alone), checks that it is a process of the claim's tenant held to the quota,
then unprepares the claim.

--fake DIR runs the same steps on this project's fake driver (DIR holds libcuda.so.1 and
libnvidia-ml.so.1 of tests/fake_driver) with a ctypes process in PyTorch's place, so that the
whole check runs on a machine without a GPU before it runs on one.

Prints each check as it goes; writes dra_plugin.log, dra_plugin.json (every check, the GPUs,
the slice, the claim, what the process saw) and dra_plugin.md to --out, beside the logs of the
scheduler, the plugin and the process; exits 1 if a check failed.
"""
import argparse
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "dra_plugin"))
import api_server  # noqa: E402  (the standard library only; the schema check when jsonschema is there)

GiB = 1 << 30
MiB = 1 << 20
DRIVER = "gpu.cuslice.io"
NODE = "dra-gpu-check"
RESERVE = GiB  # --reserve-memory
STEP = 256 * MiB  # --memory-step (the plugin's default)
QUOTA_GIB = 4
SHARE = 30
FIRST_GIB = 3  # fits in the quota, beside the CUDA context and the hook's headroom
MORE_GIB = 2  # then does not

# The container's process: what CUDA says of its GPU, then 3 GiB, then 2 GiB more; holds
# its memory until told to go (a line on stdin), so that the scheduler can be asked meanwhile.
TORCH_WORKER = r"""
import json, sys, torch
GiB = 1 << 30
oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
free, total = torch.cuda.mem_get_info()
out = {"visible": torch.cuda.device_count(), "total": total, "free": free,
       "name": torch.cuda.get_device_name(0)}
held = []
try:
    held.append(torch.empty(FIRST * GiB, dtype=torch.uint8, device="cuda"))
    held[-1].fill_(1)
    torch.cuda.synchronize()
    out["first"] = "ok"
except Exception as e:
    out["first"] = f"{type(e).__name__}: {e}"[:300]
try:
    held.append(torch.empty(MORE * GiB, dtype=torch.uint8, device="cuda"))
    out["more"] = "ok"
except oom as e:
    out["more"] = "OutOfMemoryError"
    out["more_message"] = str(e)[:300]
except Exception as e:
    out["more"] = f"{type(e).__name__}: {e}"[:300]
print(json.dumps(out), flush=True)
sys.stdin.readline()
""".replace("FIRST", str(FIRST_GIB)).replace("MORE", str(MORE_GIB))

# The same on the fake driver, through the driver API.
CTYPES_WORKER = r"""
import ctypes, json, sys
GiB = 1 << 30
cuda = ctypes.CDLL("libcuda.so.1")
def check(rc, what):
    if rc != 0:
        raise SystemExit(f"{what}: CUresult {rc}")
check(cuda.cuInit(0), "cuInit")
count = ctypes.c_int()
check(cuda.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
device = ctypes.c_int()
check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
ctx = ctypes.c_void_p()
check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device), "cuDevicePrimaryCtxRetain")
check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
free, total = ctypes.c_size_t(), ctypes.c_size_t()
check(cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
out = {"visible": count.value, "total": total.value, "free": free.value, "name": "fake"}
first, more = ctypes.c_uint64(), ctypes.c_uint64()
rc = cuda.cuMemAlloc_v2(ctypes.byref(first), ctypes.c_size_t(FIRST * GiB))
out["first"] = "ok" if rc == 0 else f"CUresult {rc}"
rc = cuda.cuMemAlloc_v2(ctypes.byref(more), ctypes.c_size_t(MORE * GiB))
out["more"] = "ok" if rc == 0 else ("OutOfMemoryError" if rc == 2 else f"CUresult {rc}")
print(json.dumps(out), flush=True)
sys.stdin.readline()
""".replace("FIRST", str(FIRST_GIB)).replace("MORE", str(MORE_GIB))


class Run:
    def __init__(self, out):
        out.mkdir(parents=True, exist_ok=True)
        self.out = out
        self.log = open(out / "dra_plugin.log", "w")
        self.rows = []
        self.facts = {}  # what dra_plugin.json records besides the checks

    def say(self, text):
        print(text, flush=True)
        self.log.write(text + "\n")
        self.log.flush()

    def check(self, what, ok, detail=""):
        ok = bool(ok)
        self.rows.append((what, "PASS" if ok else "FAIL", str(detail)))
        self.say(f"{'PASS' if ok else 'FAIL'}: {what}{' (' + str(detail) + ')' if detail != '' else ''}")
        return ok


def wait_for(condition, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    return condition()


def quantity(text):
    """A Kubernetes quantity as a number (the forms the plugin writes: 15Gi, 139776Mi, 100)."""
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?", text or "")
    if not m:
        return None
    scale = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60,
             "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
    return int(m.group(1)) * scale.get(m.group(2) or "", 1)


def smi_cards():
    """The GPUs as nvidia-smi lists them: index, uuid, name, memory in bytes (MiB precision)."""
    smi = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,name,memory.total",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True)
    cards = []
    for line in smi.stdout.strip().splitlines():
        index, uuid_, name, mib = (f.strip() for f in line.split(","))
        cards.append({"index": int(index), "uuid": uuid_, "name": name, "memory": int(mib) * MiB})
    for card in cards:  # its device node, /dev/nvidia<minor>: not always its index
        q = subprocess.run(["nvidia-smi", "-q", "-i", str(card["index"])], capture_output=True, text=True).stdout
        m = re.search(r"Minor Number\s*:\s*(\d+)", q)
        card["minor"] = int(m.group(1)) if m else card["index"]
    return cards


def nvml_cards(library):
    """The GPUs as the (fake) NVML at `library` lists them, for --fake."""
    nvml = ctypes.CDLL(str(library))
    assert nvml.nvmlInit_v2() == 0, "nvmlInit_v2 failed"

    class Memory(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

    count = ctypes.c_uint()
    assert nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0
    cards = []
    for i in range(count.value):
        handle = ctypes.c_void_p()
        assert nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) == 0
        uuid_, name, memory = ctypes.create_string_buffer(96), ctypes.create_string_buffer(96), Memory()
        assert nvml.nvmlDeviceGetUUID(handle, uuid_, 96) == 0
        assert nvml.nvmlDeviceGetName(handle, name, 96) == 0
        assert nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) == 0
        cards.append({"index": i, "uuid": uuid_.value.decode(), "name": name.value.decode(), "memory": memory.total,
                      "minor": i})
    nvml.nvmlShutdown()
    return cards


class DraKubelet:
    """dra_kubelet, driven a line at a time."""

    def __init__(self, binary, registry, env, stderr):
        self.process = subprocess.Popen([str(binary), "--registry-dir", str(registry)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
        line = self.process.stdout.readline()
        if not line or not json.loads(line).get("ready"):
            raise RuntimeError(f"the DRA test kubelet did not start (exit {self.process.poll()}); see kubelet.log")

    def __call__(self, cmd, **kw):
        self.process.stdin.write(json.dumps({"cmd": cmd, **kw}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the DRA test kubelet died; see kubelet.log")
        return json.loads(line)

    def claims(self, cmd, claim):
        meta = claim["metadata"]
        return self(cmd, version="v1", claims=[{"namespace": meta["namespace"], "uid": meta["uid"],
                                               "name": meta["name"]}])


def make_claim(device, memory, compute):
    """A ResourceClaim allocated as kube-scheduler allocates one with consumable capacity: one
    request of `memory` and `compute` of the device class, its result on `device` of this
    node's pool, with the consumed amounts and a share ID, reserved for a pod."""
    capacity = {"memory": memory, "compute": compute}
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "gpu-check", "namespace": "gpu-test", "uid": str(uuid.uuid4())},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu-fraction.cuslice.io", "allocationMode": "ExactCount", "count": 1,
            "capacity": {"requests": capacity}}}]}},
        "status": {
            "allocation": {"devices": {"results": [{
                "request": "gpu", "driver": DRIVER, "pool": NODE, "device": device,
                "consumedCapacity": capacity, "shareID": str(uuid.uuid4())}]}},
            "reservedFor": [{"resource": "pods", "name": "gpu-check-pod", "uid": str(uuid.uuid4())}],
        },
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", type=Path, required=True, help="bin/ and lib/ of cuslice")
    parser.add_argument("--dra-kubelet", type=Path, required=True)
    parser.add_argument("--kubelet-libs", default="", help="LD_LIBRARY_PATH of the DRA test kubelet")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--fake", type=Path, help="the fake driver's folder: run on it, without a GPU")
    parser.add_argument("--fake-gpus", type=int, default=2)
    parser.add_argument("--fake-memory", type=int, default=16 * GiB)
    args = parser.parse_args()
    run = Run(args.out)
    try:
        check_node(run, args)
    except Exception as e:  # a step that could not run at all is a failure, said in the log
        run.check("the check ran to its end", False, f"{type(e).__name__}: {e}")
    return finish(run, args.out)


def check_node(run, args):
    bin_dir, hook = args.tree / "bin", (args.tree / "lib" / "libcuslice.so").resolve()
    out = args.out
    tmp = Path(tempfile.mkdtemp(prefix="cuslice-dra-gpu-"))
    shm = f"/cuslice-dra-{os.getpid()}"
    socket = tmp / "run" / "cuslice.sock"
    socket.parent.mkdir()
    (tmp / "cuslice.yaml").write_text("scheduler:\n  quantum: 100ms\ntenants: []\n")
    registry, plugin_dir, cdi_dir = tmp / "plugins_registry", tmp / "plugins" / DRIVER, tmp / "cdi"
    registry.mkdir(parents=True)
    fake = args.fake is not None
    run.facts.update(mode="fake driver" if fake else "GPU", tree=str(args.tree),
                     version=(subprocess.run([bin_dir / "cuslice", "version"], capture_output=True,
                                             text=True).stdout.strip().splitlines() or [""])[0],
                     schema_checked=api_server.SCHEMA_CHECKED)
    if not api_server.SCHEMA_CHECKED:
        run.say("WARNING: no jsonschema here: the slice is checked against the API server's own rules only")

    # The node's driver: the real one, or the fake (its libraries first, its devices described).
    node_env = {}
    dev_root = Path("/dev")
    if fake:
        node_env = {"LD_LIBRARY_PATH": str(args.fake.resolve()), "FAKE_CUDA_DEVICE_COUNT": str(args.fake_gpus),
                    "FAKE_CUDA_DEVICE_MEMORY": str(args.fake_memory)}
        os.environ.update(node_env)  # before nvml_cards loads the fake NVML
        dev_root = tmp / "dev"
        dev_root.mkdir()
        for name in ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"] + [f"nvidia{i}" for i in range(args.fake_gpus)]:
            (dev_root / name).touch()
        cards = nvml_cards(args.fake / "libnvidia-ml.so.1")
    else:
        cards = smi_cards()
    run.facts["gpus"] = cards
    run.say(f"GPUs: {json.dumps(cards)}")

    procs = []

    def start(cmd, log, env=None, **kw):
        p = subprocess.Popen([str(c) for c in cmd], stdin=kw.pop("stdin", subprocess.DEVNULL),
                             stderr=open(out / log, "w"), env=env, **kw)
        procs.append(p)
        return p

    api = api_server.ApiServer(token=uuid.uuid4().hex)
    try:
        api.store.objects[f"/api/v1/nodes/{NODE}"] = {
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": str(uuid.uuid4())}}
        kubeconfig = api.kubeconfig(tmp / "kubeconfig")
        scheduler = start([bin_dir / "cuslice-scheduler", "--config", tmp / "cuslice.yaml", "--socket", socket,
                           "--shm-name", shm], "scheduler.log", env=dict(os.environ, **node_env))
        if not run.check("cuslice-scheduler answers", wait_for(socket.exists) and scheduler.poll() is None):
            return
        # The kubelet's own libraries (gRPC, protobuf: not the tarball's versions) come first.
        libs = [p for p in (args.kubelet_libs, str(args.tree / "lib")) if p]
        kubelet_env = dict(os.environ, LD_LIBRARY_PATH=":".join(libs))
        for k in node_env:
            kubelet_env.pop(k, None)
        kubelet = DraKubelet(args.dra_kubelet, registry, kubelet_env, open(out / "kubelet.log", "w"))
        procs.append(kubelet.process)
        plugin = start([bin_dir / "cuslice-dra-plugin", "--node-name", NODE, "--kubeconfig", kubeconfig,
                        "--plugin-dir", plugin_dir, "--registry-dir", registry, "--cdi-dir", cdi_dir,
                        "--scheduler-socket", socket, "--shm-name", shm, "--hook", hook,
                        "--preload-file", tmp / "state" / "ld.so.preload", "--dev-root", dev_root,
                        "--reserve-memory", f"{RESERVE // MiB}MiB", "--poll-interval", "0.2",
                        "--scheduler-grace", "5", "--backoff-max", "1", "--log-level", "debug"],
                       "plugin.log", env=dict(os.environ, **node_env))

        # 1. Registration, as the kubelet's plugin watcher does it.
        info = wait_for(lambda: (a := kubelet("register")).get("ok") and a, timeout=30) or kubelet("register")
        run.say("registration: " + json.dumps(info))
        if not run.check("the plugin registers with the kubelet as a DRA plugin of v1 and v1beta1",
                         info.get("ok") and info.get("name") == DRIVER and info.get("type") == "DRAPlugin"
                         and "v1.DRAPlugin" in info.get("versions", []), info.get("error", "")):
            return

        # 2. The ResourceSlice: one device per GPU, its memory less the reserve, its identity.
        name = f"{NODE}-{DRIVER}"
        s = wait_for(lambda: (x := api.store.slices().get(name)) and len(x["spec"]["devices"]) == len(cards) and x,
                     timeout=30)
        s = s or api.store.slices().get(name)
        run.facts["slice"] = s
        (out / "resourceslice.json").write_text(json.dumps(s, indent=2))
        devices = {d["name"]: d for d in (s or {}).get("spec", {}).get("devices", [])}
        if not run.check(f"the ResourceSlice {name} lists {len(cards)} devices, one per GPU",
                         s and sorted(devices) == sorted(f"gpu-{c['index']}" for c in cards), sorted(devices)):
            return
        run.check("it is the node's pool, of driver gpu.cuslice.io, owned by the Node",
                  s["spec"]["driver"] == DRIVER and s["spec"]["nodeName"] == NODE
                  and s["spec"]["pool"]["name"] == NODE and s["metadata"].get("ownerReferences", [{}])[0].get("kind")
                  == "Node")
        for c in cards:
            d = devices[f"gpu-{c['index']}"]
            a, cap = d.get("attributes", {}), d.get("capacity", {})
            expected = (c["memory"] - RESERVE) // STEP * STEP
            got = quantity(cap.get("memory", {}).get("value"))
            run.check(f"gpu-{c['index']}: memory {cap.get('memory', {}).get('value')} = its "
                      f"{c['memory'] / GiB:.2f} GiB less the 1 GiB reserve, in 256 MiB steps", got == expected,
                      f"expected {expected} bytes, got {got}")
            run.check(f"gpu-{c['index']}: uuid and productName are the GPU's",
                      a.get("uuid", {}).get("string") == c["uuid"] and a.get("productName", {}).get("string")
                      == c["name"] and a.get("index", {}).get("int") == c["index"],
                      f"{a.get('uuid')} {a.get('productName')}")
            run.check(f"gpu-{c['index']}: compute 100, shared by capacity",
                      cap.get("compute", {}).get("value") == "100" and d.get("allowMultipleAllocations") is True)
        run.check("the API server accepted every write" + ("" if api_server.SCHEMA_CHECKED else
                                                           " (its own rules; no jsonschema here for the schema)"),
                  not api.store.rejected, json.dumps(api.store.rejected)[:300])

        # 3. A claim of 4 GiB and 30% of GPU 0, allocated as kube-scheduler would; prepared.
        claim = make_claim("gpu-0", f"{QUOTA_GIB}Gi", str(SHARE))
        api.store.put_claim(claim)
        uid = claim["metadata"]["uid"]
        share_id = claim["status"]["allocation"]["devices"]["results"][0]["shareID"]
        run.facts["claim"] = claim
        answer = kubelet.claims("prepare", claim)
        run.say("NodePrepareResources: " + json.dumps(answer))
        prepared = answer.get("claims", {}).get(uid, {})
        cdi_id = f"{DRIVER}/claim={uid}"
        if not run.check("NodePrepareResources prepares the claim: gpu-0, its CDI device, its share ID",
                         answer.get("ok") and prepared.get("error") == "" and prepared.get("devices") ==
                         [{"request_names": ["gpu"], "pool_name": NODE, "device_name": "gpu-0",
                           "cdi_device_ids": [cdi_id], "share_id": share_id}],
                         prepared.get("error") or answer.get("error", "")):
            return
        again = kubelet.claims("prepare", claim)
        run.check("asked again (the kubelet retries), the same answer", again.get("claims", {}).get(uid) == prepared)
        tenant = f"dra-{uid}"

        def status():
            res = subprocess.run([bin_dir / "cuslice", "status", "--json", "--socket", socket, "--shm-name", shm],
                                 capture_output=True, text=True)
            try:
                return json.loads(res.stdout)
            except ValueError:
                return {"tenants": [], "gpus": []}

        tenants = lambda: {t["name"]: t for t in status()["tenants"]}  # noqa: E731
        t = wait_for(lambda: tenants().get(tenant), timeout=15) or {}
        run.check(f"the tenant {tenant[:16]}... has exactly the quota", t.get("memory_quota_bytes") == QUOTA_GIB * GiB,
                  t.get("memory_quota_bytes"))
        run.check("and the share", abs(t.get("share", 0) - SHARE / 100) < 1e-6, t.get("share"))

        # 4. The CDI spec, and the container's process as the runtime would start it from it.
        spec_path = cdi_dir / f"{DRIVER}-claim_{uid}.json"
        spec = json.loads(spec_path.read_text()) if spec_path.exists() else None
        if not run.check("the CDI spec of the claim is written", spec and spec["kind"] == "gpu.cuslice.io/claim"
                         and spec["devices"][0]["name"] == uid, spec_path):
            return
        edits = spec["devices"][0]["containerEdits"]
        env_cdi = dict(e.split("=", 1) for e in edits["env"])
        shown = dict(spec, devices=[dict(spec["devices"][0], containerEdits=dict(edits, env=[
            e if not e.startswith("CUSLICE_TENANT=") else "CUSLICE_TENANT=" + tenant + ":<key>" for e in edits["env"]]))])
        (out / "cdi_spec.json").write_text(json.dumps(shown, indent=2))
        mounts = {m["containerPath"]: m["hostPath"] for m in edits["mounts"]}
        nodes = {d["path"] for d in edits.get("deviceNodes", [])}
        minor = cards[0].get("minor", 0)  # GPU 0's device node, /dev/nvidia<minor>
        run.check("it names the tenant, GPU 0, the quota and GPU 0's UUID",
                  env_cdi.get("CUSLICE_TENANT", "").split(":")[0] == tenant and env_cdi.get("CUSLICE_GPU_INDICES")
                  == "0" and env_cdi.get("CUSLICE_MEMORY_LIMIT") == str(QUOTA_GIB * GiB)
                  and env_cdi.get("NVIDIA_VISIBLE_DEVICES") == cards[0]["uuid"],
                  {k: v for k, v in env_cdi.items() if k != "CUSLICE_TENANT"})
        preload = Path(mounts.get("/etc/ld.so.preload", "/nonexistent"))
        run.check("its mounts: the hook, /etc/ld.so.preload naming it, the socket folder, the segment",
                  Path(mounts.get("/opt/cuslice/lib/libcuslice.so", "")).resolve() == hook
                  and preload.exists() and preload.read_text() == "/opt/cuslice/lib/libcuslice.so\n"
                  and mounts.get("/run/cuslice") == str(socket.parent) and Path(mounts.get("/dev/shm" + shm, "")).exists(),
                  json.dumps(mounts))
        dev = lambda n: str(dev_root / n) if fake else f"/dev/{n}"  # noqa: E731
        want_nodes = {"/dev/nvidiactl", "/dev/nvidia-uvm", f"/dev/nvidia{minor}"}
        paths = {d["path"]: d.get("hostPath", d["path"]) for d in edits.get("deviceNodes", [])}
        run.check("its device nodes: nvidiactl, nvidia-uvm and GPU 0's, none of another GPU",
                  want_nodes <= nodes and not any(re.fullmatch(r"/dev/nvidia\d+", n) and n != f"/dev/nvidia{minor}"
                                                  for n in nodes)
                  and all(Path(paths[n] if paths[n] != n else dev(n[5:])).exists() for n in want_nodes), sorted(nodes))

        env = {k: v for k, v in os.environ.items()
               if not k.startswith("CUSLICE_") and k not in ("LD_PRELOAD", "CUDA_VISIBLE_DEVICES")}
        env.update(env_cdi)
        env["CUSLICE_SOCKET"] = os.path.join(mounts["/run/cuslice"], os.path.basename(env_cdi["CUSLICE_SOCKET"]))
        env["LD_PRELOAD"] = mounts["/opt/cuslice/lib/libcuslice.so"]  # what /etc/ld.so.preload names, on the host
        env["CUDA_VISIBLE_DEVICES"] = env_cdi["NVIDIA_VISIBLE_DEVICES"]  # the NVIDIA runtime shows these alone
        env["CUSLICE_LOG_LEVEL"] = "info"
        if fake:  # the fake driver has no CUDA_VISIBLE_DEVICES: it shows the claim's GPU 0 alone so
            env["FAKE_CUDA_DEVICE_COUNT"] = "1"
        worker = start([sys.executable, "-c", CTYPES_WORKER if fake else TORCH_WORKER], "worker.log", env=env,
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = worker.stdout.readline()
        run.say(f"worker: {line.strip()}")
        seen = json.loads(line) if line.strip().startswith("{") else {}
        run.facts["worker"] = seen
        said = (out / "worker.log").read_text().strip().splitlines()
        hook_said = [x for x in said if x.startswith("cuslice[")]  # the hook's own lines: why it refused
        if not run.check("the process started and reached CUDA", seen, "; ".join(hook_said[-3:] + said[-1:])[:600]):
            return
        run.check("it is a registered process of the claim's tenant",
                  wait_for(lambda: worker.pid in tenants().get(tenant, {}).get("pids", []), timeout=10))
        run.check("it sees one GPU", seen.get("visible") == 1, seen.get("visible"))
        run.check(f"CUDA (mem_get_info) reports the quota, {QUOTA_GIB} GiB, as the GPU's memory",
                  seen.get("total") == QUOTA_GIB * GiB, f"total {seen.get('total')}, free {seen.get('free')}")
        run.check(f"{FIRST_GIB} GiB can be allocated", seen.get("first") == "ok", seen.get("first"))
        run.check(f"{MORE_GIB} GiB more raise " + ("CUDA_ERROR_OUT_OF_MEMORY" if fake else "torch.OutOfMemoryError"),
                  seen.get("more") == "OutOfMemoryError", seen.get("more_message", seen.get("more")))
        st = status()
        row = next((r for g in st["gpus"] if g["index"] == 0 for r in g["tenants"] if r["name"] == tenant), {})
        run.check(f"the scheduler counts its {FIRST_GIB} GiB on GPU 0", row.get("memory_used_bytes", 0) >= FIRST_GIB * GiB,
                  f"{row.get('memory_used_bytes', 0)} bytes")
        worker.stdin.write("done\n")
        worker.stdin.flush()
        worker.wait(timeout=60)

        # 5. NodeUnprepareResources: the tenant and the CDI spec go.
        answer = kubelet.claims("unprepare", claim)
        run.say("NodeUnprepareResources: " + json.dumps(answer))
        run.check("NodeUnprepareResources succeeds", answer.get("ok") and answer["claims"].get(uid) == {"error": ""},
                  answer)
        started = time.monotonic()
        gone = wait_for(lambda: tenant not in tenants(), timeout=15)
        run.check("the tenant is removed", gone, f"{time.monotonic() - started:.2f} s")
        run.check("and the CDI spec", not spec_path.exists())
        checkpoint = json.loads((plugin_dir / "checkpoint.json").read_text())
        run.check("the checkpoint holds no claim", checkpoint.get("claims") == {})
        run.check("the plugin ran throughout", plugin.poll() is None and scheduler.poll() is None)
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                if p.stdin:
                    try:
                        p.stdin.close()
                    except OSError:
                        pass
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
        api.stop()
        try:
            os.unlink("/dev/shm" + shm)
        except OSError:
            pass
    return 0


def finish(run, out):
    failed = [r for r in run.rows if r[1] == "FAIL"]
    with open(out / "dra_plugin.md", "w") as f:
        f.write("| check | result | detail |\n|---|---|---|\n")
        for what, result, detail in run.rows:
            f.write(f"| {what} | {result} | {detail.replace('|', '/')} |\n")
    results = dict(run.facts, passed=len(run.rows) - len(failed), failed=len(failed),
                   checks=[{"check": w, "result": r, "detail": d} for w, r, d in run.rows])
    (out / "dra_plugin.json").write_text(json.dumps(results, indent=2, default=str))
    run.say(f"{len(run.rows) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed or not run.rows else 0


if __name__ == "__main__":
    sys.exit(main())
