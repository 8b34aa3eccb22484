"""The GPU half of tests/gpu/device_plugin.sh (which checks the machine and finds cuslice first).

A scheduler on a private socket and segment, the fake kubelet, and cuslice-device-plugin on
the real NVML. Prints each check as it goes, writes the log and a summary table to --out, and
exits 1 if a check failed.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GiB = 1 << 30
MEMORY = "cuslice.io/gpu-memory"
COMPUTE = "cuslice.io/gpu-compute"
QUOTA_GIB = 8
SHARE = 30

# The "container": what it sees of its GPU, then how much it can take.
WORKER = r"""
import json, os, sys, time, torch
free, total = torch.cuda.mem_get_info()
held, refused_at = [], None
for i in range(64):
    try:
        held.append(torch.empty(GiB, dtype=torch.uint8, device="cuda"))
    except torch.cuda.OutOfMemoryError:
        refused_at = i
        break
print(json.dumps({"total": total, "free": free, "allocated_gib": len(held), "refused_at": refused_at,
                  "visible": torch.cuda.device_count()}), flush=True)
time.sleep(float(os.environ.get("HOLD_SECONDS", "3")))
""".replace("GiB", str(GiB))


class Run:
    def __init__(self, out):
        out.mkdir(parents=True, exist_ok=True)
        self.log = open(out / "device_plugin.log", "w")
        self.rows = []

    def say(self, text):
        print(text, flush=True)
        self.log.write(text + "\n")
        self.log.flush()

    def check(self, what, ok, detail=""):
        self.rows.append((what, "PASS" if ok else "FAIL", detail))
        self.say(f"{'PASS' if ok else 'FAIL'}: {what}{' (' + detail + ')' if detail else ''}")
        return ok


def wait_for(condition, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    return condition()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", type=Path, required=True)
    parser.add_argument("--fake-kubelet", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    bin_dir, hook = args.tree / "bin", args.tree / "lib" / "libcuslice.so"
    run = Run(args.out)
    tmp = Path(tempfile.mkdtemp(prefix="cuslice-dp-"))
    shm = f"/cuslice-dp-{os.getpid()}"
    socket = tmp / "run" / "cuslice.sock"
    socket.parent.mkdir()
    (tmp / "cuslice.yaml").write_text("scheduler:\n  quantum: 100ms\ntenants: []\n")
    procs = []

    def start(cmd, **kw):
        p = subprocess.Popen([str(c) for c in cmd], **kw)
        procs.append(p)
        return p

    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,name,memory.total",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True)
        cards = [dict(zip(("index", "uuid", "name", "mib"), (f.strip() for f in line.split(","))))
                 for line in smi.stdout.strip().splitlines()]
        run.say(f"GPUs: {cards}")
        scheduler_cmd = [bin_dir / "cuslice-scheduler", "--config", tmp / "cuslice.yaml", "--socket", socket,
                         "--shm-name", shm]
        scheduler = [start(scheduler_cmd, stderr=open(args.out / "device_plugin.scheduler.log", "w"))]

        def restart_scheduler():
            """SIGTERM, then the same scheduler again; returns when the old one exited."""
            scheduler[0].send_signal(signal.SIGTERM)
            scheduler[0].wait(timeout=30)
            stopped = time.monotonic()
            scheduler[0] = start(scheduler_cmd, stderr=open(args.out / "device_plugin.scheduler.log", "a"))
            return stopped

        wait_for(socket.exists)
        # The tarball carries gRPC and protobuf for the plugin: the fake kubelet uses them too.
        kubelet_env = dict(os.environ, LD_LIBRARY_PATH=str(args.tree / "lib"))
        kubelet = start([args.fake_kubelet, "--plugin-dir", tmp / "device-plugins",
                         "--pod-resources-socket", tmp / "pod-resources" / "kubelet.sock"],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=kubelet_env)
        assert json.loads(kubelet.stdout.readline())["ready"]

        def ask(cmd, **kw):
            kubelet.stdin.write(json.dumps({"cmd": cmd, **kw}) + "\n")
            kubelet.stdin.flush()
            return json.loads(kubelet.stdout.readline())

        start([bin_dir / "cuslice-device-plugin", "--plugin-dir", tmp / "device-plugins",
               "--pod-resources-socket", tmp / "pod-resources" / "kubelet.sock", "--scheduler-socket", socket,
               "--shm-name", shm, "--hook", hook, "--preload-file", tmp / "ld.so.preload"],
              stderr=open(args.out / "device_plugin.plugin.log", "w"))
        for resource in (MEMORY, COMPUTE):
            run.check(f"{resource} registered", ask("wait_registered", resource=resource)["ok"])

        # 1. Capacity: each card's memory in whole GiB, 100 compute devices per card; healthy,
        # on every card, no more units than the scheduler has tenants left (64 at most).
        devices = ask("devices", resource=MEMORY)["devices"]
        for card in cards:
            mine = [d for d in devices if d.startswith(card["uuid"] + "-m")]
            expected = int(card["mib"]) * (1 << 20) // GiB
            healthy = sum(devices[d] == "Healthy" for d in mine)
            run.check(f"GPU {card['index']} ({card['name']}, {card['mib']} MiB) advertised as {len(mine)} GiB, "
                      f"{healthy} healthy", len(mine) == expected and healthy > 0, f"expected {expected}")
        healthy = sum(h == "Healthy" for h in devices.values())
        run.check(f"{healthy} memory units healthy in all: no more than the scheduler's 64 tenants",
                  0 < healthy <= 64)
        compute = ask("devices", resource=COMPUTE)["devices"]
        run.check(f"{len(compute)} compute devices", len(compute) == 100 * len(cards))

        # 2. An allocation.
        pod = ask("admit", namespace="gpu-test", pod="worker",
                  containers=[{"name": "main", "requests": {MEMORY: QUOTA_GIB, COMPUTE: SHARE}}])
        run.say("Allocate answer: " + json.dumps(pod))
        if not run.check(f"a pod of {QUOTA_GIB} GiB and {SHARE}% admitted", pod.get("ok")):
            return finish(run, args.out)
        answer = pod["containers"]["main"][MEMORY]
        env_from_allocate = answer["envs"]
        tenant = env_from_allocate["CUSLICE_TENANT"].split(":")[0]
        gpu = int(env_from_allocate["CUSLICE_GPU_INDICES"])
        card = next(c for c in cards if int(c["index"]) == gpu)
        def status():
            """`cuslice status --json`; nothing while no scheduler answers (a restart)."""
            out = subprocess.run([bin_dir / "cuslice", "status", "--json", "--socket", socket, "--shm-name", shm],
                                 capture_output=True, text=True).stdout
            try:
                return json.loads(out)
            except ValueError:
                return {"tenants": [], "gpus": []}

        tenants = lambda: {t["name"]: t for t in status()["tenants"]}  # noqa: E731
        run.check("the tenant has exactly the quota",
                  wait_for(lambda: tenants().get(tenant, {}).get("memory_quota_bytes") == QUOTA_GIB * GiB))
        run.check("and the share, once PodResources linked it",
                  wait_for(lambda: abs(tenants().get(tenant, {}).get("share", 0) - SHARE / 100) < 1e-6))

        # 3. The container's process, as the runtime would start it: the Allocate environment;
        # mounts by their host paths (the socket's directory, the hook that /etc/ld.so.preload
        # names); the GPU the container would see, alone.
        env = container_env(answer, card)
        worker = start([sys.executable, "-c", WORKER], env=env, stdout=subprocess.PIPE,
                       stderr=open(args.out / "device_plugin.worker.log", "w"), text=True)
        line = worker.stdout.readline()
        run.say(f"worker: {line.strip()}")
        seen = json.loads(line) if line.strip() else {}
        run.check("the process is a registered process of the tenant",
                  wait_for(lambda: worker.pid in tenants().get(tenant, {}).get("pids", []), timeout=5))
        run.check("CUDA reports the quota as the GPU's memory", seen.get("total") == QUOTA_GIB * GiB,
                  f"total {seen.get('total')}")
        run.check("it sees one GPU", seen.get("visible") == 1)
        # The CUDA context and the hook's headroom come out of the quota: 6 or 7 GiB of 8.
        run.check("allocations stop at the quota", seen.get("refused_at") is not None
                  and QUOTA_GIB - 2 <= seen["allocated_gib"] < QUOTA_GIB,
                  f"{seen.get('allocated_gib')} GiB allocated before the refusal")
        used = status()["gpus"]
        row = next((r for g in used if g["index"] == gpu for r in g["tenants"] if r["name"] == tenant), {})
        run.check("the scheduler counts it on the node's GPU index", row.get("memory_used_bytes", 0) > 0,
                  f"{row.get('memory_used_bytes', 0)} bytes on GPU {gpu}")
        worker.wait(timeout=60)

        # 4. The pod goes: so does the tenant.
        ask("delete", namespace="gpu-test", pod="worker")
        started = time.monotonic()
        gone = wait_for(lambda: tenant not in tenants(), timeout=20)
        run.check("the tenant is removed when the pod goes", gone, f"{time.monotonic() - started:.1f} s")
        if len(cards) > 1:
            placement(run, ask, tenants, status, cards)
        restart(run, ask, tenants, cards, restart_scheduler, start, args.out)
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
        try:
            os.unlink("/dev/shm" + shm)
        except OSError:
            pass
    return finish(run, args.out)


def container_env(answer, card):
    """The environment of the container's process: the image's (here: this one, without
    cuslice's own settings) and the Allocate answer's, with the mounts by their host paths."""
    mounts = {m["container_path"]: m["host_path"] for m in answer["mounts"]}
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CUSLICE_") and k not in ("LD_PRELOAD", "CUDA_VISIBLE_DEVICES")}
    env.update(answer["envs"])
    env["CUSLICE_SOCKET"] = os.path.join(mounts["/run/cuslice"], os.path.basename(env["CUSLICE_SOCKET"]))
    env["LD_PRELOAD"] = mounts["/opt/cuslice/lib/libcuslice.so"]
    env["CUDA_VISIBLE_DEVICES"] = card["uuid"]
    env["CUSLICE_LOG_LEVEL"] = "info"
    return env


# A container that keeps launching small kernels, for the restart check.
LOOP = r"""
import os, time, torch
x = torch.zeros(1 << 20, device="cuda")
end = time.monotonic() + float(os.environ["LOOP_SECONDS"])
print("ready", flush=True)
while time.monotonic() < end:
    x.add_(1)
    torch.cuda.synchronize()
    time.sleep(0.005)
"""


def restart(run, ask, tenants, cards, restart_scheduler, start, out):
    """6. A scheduler restart while a container's process runs: how long until the process is
    a registered process of its tenant again, under the new scheduler."""
    pod = ask("admit", namespace="gpu-test", pod="restart",
              containers=[{"name": "main", "requests": {MEMORY: 4, COMPUTE: 30}}], pick="preferred")
    if not run.check("a pod of 4 GiB and 30% for the restart", pod.get("ok")):
        return
    answer = pod["containers"]["main"][MEMORY]
    tenant = answer["envs"]["CUSLICE_TENANT"].split(":")[0]
    card = next(c for c in cards if int(c["index"]) == int(answer["envs"]["CUSLICE_GPU_INDICES"]))
    env = dict(container_env(answer, card), LOOP_SECONDS="40")
    worker = start([sys.executable, "-c", LOOP], env=env, stdout=subprocess.PIPE,
                   stderr=open(out / "device_plugin.restart_worker.log", "w"), text=True)
    worker.stdout.readline()
    registered = lambda: worker.pid in tenants().get(tenant, {}).get("pids", [])  # noqa: E731
    run.check("its process is registered", wait_for(registered, timeout=10))
    stopped = restart_scheduler()
    back = wait_for(registered, timeout=30)
    gap = time.monotonic() - stopped
    run.check("after a scheduler restart the running process is registered again",
              back and worker.poll() is None, f"{gap:.2f} s from the old scheduler's exit")
    run.check("with its share", wait_for(lambda: abs(tenants().get(tenant, {}).get("share", 0) - 0.3) < 1e-6))
    worker.terminate()
    worker.wait(timeout=20)
    ask("delete", namespace="gpu-test", pod="restart")


def placement(run, ask, tenants, status, cards):
    """5. One pod of 4 GiB and 60% per card: compute fits once per GPU, so each lands on a GPU
    of its own, is shown only there, and one more such pod is refused."""
    gpus = {}
    for i in range(len(cards)):
        pod = ask("admit", namespace="gpu-test", pod=f"sixty-{i}",
                  containers=[{"name": "main", "requests": {MEMORY: 4, COMPUTE: 60}}], pick="preferred")
        if pod.get("ok"):
            envs = pod["containers"]["main"][MEMORY]["envs"]
            gpus[envs["CUSLICE_TENANT"].split(":")[0]] = int(envs["CUSLICE_GPU_INDICES"])
    run.check(f"{len(cards)} pods of 4 GiB and 60% on {len(cards)} GPUs, one each",
              sorted(gpus.values()) == sorted(int(c["index"]) for c in cards), json.dumps(gpus))
    linked = wait_for(lambda: all(abs(tenants().get(t, {}).get("share", 0) - 0.6) < 1e-6 for t in gpus))
    shown = {}
    for g in status()["gpus"]:
        for t in g["tenants"]:
            if t["name"] in gpus:
                shown.setdefault(t["name"], []).append(g["index"])
    run.check("each is shown by cuslice status on its own GPU only, with its share",
              linked and all(shown.get(t) == [g] for t, g in gpus.items()), json.dumps(shown))
    more = ask("admit", namespace="gpu-test", pod="sixty-more",
               containers=[{"name": "main", "requests": {MEMORY: 4, COMPUTE: 60}}], pick="preferred")
    run.check("one more such pod is refused: no GPU has 60% left", not more.get("ok"),
              str(more.get("error", more))[:160])
    for i in range(len(cards)):
        ask("delete", namespace="gpu-test", pod=f"sixty-{i}")
    run.check("their tenants go with the pods", wait_for(lambda: not set(gpus) & set(tenants()), timeout=20))


def finish(run, out):
    with open(out / "device_plugin.md", "w") as f:
        f.write("| check | result | detail |\n|---|---|---|\n")
        for what, result, detail in run.rows:
            f.write(f"| {what} | {result} | {detail} |\n")
    failed = [r for r in run.rows if r[1] == "FAIL"]
    run.say(f"{len(run.rows) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
