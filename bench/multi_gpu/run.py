#!/usr/bin/env python3
"""Multi-GPU benchmark: shares per GPU, a tenant on several GPUs, and data-parallel training
with NCCL under a quota, each natively and under cuslice, alternately, in one run.

  python3 bench/multi_gpu/run.py --cuslice TREE --out DIR [--only pairs,spanning,ddp]
                                 [--reps N] [--duration S]

TREE: an unpacked tarball or installation (bench/multi_gpu/run.sh finds one). Needs two GPUs
or more (it uses GPUs 0 and 1), PyTorch with NCCL, and torchrun.

Scenarios (every worker is bench/compute/worker.py's GEMM loop, 8192^2 bf16, four in flight):
  alone     one loop on each GPU: the reference for "of one loop alone"
  pairs     GPU 1: tenants a 70% and b 30%; GPU 0 at the same time: c 50% and d 50%;
            each pair only on its GPU (cuslice run --gpus)
  spanning  one tenant of 70% on GPUs 0 and 1 (a process on each) beside a 30% tenant on
            each GPU: a tenant's share holds on each GPU it uses
  ddp       torchrun, one process per GPU (allreduce.py): DDP steps, then all-reduce of
            256 MiB; under `cuslice run --memory 8GiB --gpus 0,1`, with the driver's figure
            per process sampled by nvidia-smi, and once with a quota too small for the run
Each scenario runs natively (no hook, no daemon) and under cuslice in turn, --reps times.
Writes DIR/multi_gpu.md (the tables), DIR/multi_gpu.json (raw), DIR/multi_gpu.log.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKER = HERE.parent / "compute" / "worker.py"
GiB = 1 << 30

# Scenario layouts: (worker id, tenant, share %, GPUs of the tenant, GPU the process runs on)
LAYOUTS = {
    "alone": [("g0", "solo0", 100, "0", 0), ("g1", "solo1", 100, "1", 1)],
    "pairs": [("a", "a", 70, "1", 1), ("b", "b", 30, "1", 1), ("c", "c", 50, "0", 0), ("d", "d", 50, "0", 0)],
    "spanning": [("m0", "m", 70, "0,1", 0), ("m1", "m", 70, "0,1", 1), ("p", "p", 30, "0", 0), ("q", "q", 30, "1", 1)],
}


class Log:
    def __init__(self, path):
        self.f = open(path, "w")

    def say(self, text):
        print(text, flush=True)
        self.f.write(text + "\n")
        self.f.flush()


def cuslice_run(tree, sock, tenant, extra):
    return [str(tree / "bin" / "cuslice"), "run", "--socket", str(sock), "--tenant", tenant, *extra, "--"]


def status_json(tree, sock):
    r = subprocess.run([str(tree / "bin" / "cuslice"), "status", "--json", "--socket", str(sock)],
                       capture_output=True, text=True, timeout=20)
    try:
        return json.loads(r.stdout)
    except ValueError:
        return {"error": (r.stdout + r.stderr)[-400:]}


def stop_all(procs):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()


def run_gemm_phase(opts, log, mode, layout, status_at=None):
    """Starts the layout's GEMM loops (mode native or cuslice), gives them one go time, and
    returns {worker id: GEMMs per second} (and the status taken mid-run under cuslice)."""
    sync = Path(tempfile.mkdtemp(prefix=f"mgpu-{layout}-", dir=opts.tmp))
    sock = sync / "cuslice.sock"
    procs, ids = [], []
    logf = open(opts.out / "multi_gpu.workers.log", "a")
    logf.write(f"== {mode} {layout}\n")
    logf.flush()
    for i, (wid, tenant, share, gpus, gpu) in enumerate(LAYOUTS[layout]):
        cmd = [opts.python, str(WORKER), "gemm", "--id", wid, "--sync", str(sync),
               "--duration", str(opts.duration), "--max-wait", "240"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUSLICE_") and k != "LD_PRELOAD"}
        if mode == "cuslice":
            # The process's own GPU inside the tenant's: `--gpus` sets the tenant's GPUs (and
            # CUDA_VISIBLE_DEVICES); env narrows what this one process sees to one of them.
            cmd = cuslice_run(opts.tree, sock, tenant, ["--share", f"{share}%", "--gpus", gpus]) + \
                ["env", f"CUDA_VISIBLE_DEVICES={gpu}"] + cmd
        else:
            env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        procs.append(subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT))
        ids.append(wid)
        if i == 0 and mode == "cuslice":
            time.sleep(1.0)  # the first run starts the scheduler; the others join it
    status = None
    try:
        end = time.monotonic() + 240
        while time.monotonic() < end and not all((sync / f"ready.{w}").exists() for w in ids):
            if any(p.poll() not in (None, 0) for p in procs):
                raise RuntimeError(f"a worker of {mode} {layout} exited early (multi_gpu.workers.log)")
            time.sleep(0.1)
        t0 = time.monotonic() + 0.5
        (sync / "go.tmp").write_text(repr(t0))
        os.replace(sync / "go.tmp", sync / "go")
        if mode == "cuslice" and status_at is not None:
            time.sleep(max(0.0, t0 + status_at - time.monotonic()))
            status = status_json(opts.tree, sock)
        for p in procs:
            p.wait(timeout=opts.duration + 120)
    finally:
        stop_all(procs)
    rates = {}
    for w in ids:
        r = json.loads((sync / f"result.{w}.json").read_text())
        if not r.get("ok"):
            raise RuntimeError(f"worker {w} failed: {r.get('error')}")
        rates[w] = r["rate_units_s"]
    log.say(f"{mode:8} {layout:9} " + "  ".join(f"{w} {v:7.2f}/s" for w, v in rates.items()))
    return rates, status


def gemm_scenarios(opts, log, results):
    for rep in range(opts.reps):
        for mode in ("native", "cuslice") if rep % 2 == 0 else ("cuslice", "native"):
            rates, _ = run_gemm_phase(opts, log, mode, "alone")
            results.setdefault("alone", []).append({"rep": rep, "mode": mode, "rates": rates})
            for layout in ("pairs", "spanning"):
                if layout not in opts.only:
                    continue
                rates, status = run_gemm_phase(opts, log, mode, layout, status_at=opts.duration / 2)
                results.setdefault(layout, []).append({"rep": rep, "mode": mode, "rates": rates,
                                                       "status": status})


class SmiSampler(threading.Thread):
    """The driver's figure for each compute process (nvidia-smi, natively), largest seen."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak, self.stop = {}, threading.Event()

    def run(self):
        while not self.stop.is_set():
            r = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory",
                                "--format=csv,noheader,nounits"], capture_output=True, text=True)
            for line in r.stdout.strip().splitlines():
                f = [x.strip() for x in line.split(",")]
                if len(f) == 3 and f[2].isdigit():
                    key = (int(f[0]), f[1])
                    self.peak[key] = max(self.peak.get(key, 0), int(f[2]) << 20)
            self.stop.wait(0.25)


def run_ddp(opts, log, mode, quota, extra_gib=0.0):
    sync = Path(tempfile.mkdtemp(prefix="mgpu-ddp-", dir=opts.tmp))
    sock = sync / "cuslice.sock"
    torchrun = [opts.python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                str(HERE / "allreduce.py"), "--extra-gib", str(extra_gib), "--hold", "3", "--results", str(sync)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSLICE_") and k != "LD_PRELOAD"}
    if mode == "cuslice":
        cmd = cuslice_run(opts.tree, sock, "ddp", ["--memory", quota, "--share", "100%", "--gpus", "0,1"]) + torchrun
    else:
        env["CUDA_VISIBLE_DEVICES"] = "0,1"
        cmd = torchrun
    sampler = SmiSampler()
    sampler.start()
    logf = open(opts.out / "multi_gpu.workers.log", "a")
    logf.write(f"== ddp {mode} {quota} +{extra_gib}\n")
    logf.flush()
    proc = subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT)
    status = None
    results = [sync / "rank0.json", sync / "rank1.json"]
    try:
        end = time.monotonic() + 300
        while time.monotonic() < end and proc.poll() is None and not all(r.exists() for r in results):
            time.sleep(0.1)
        if mode == "cuslice" and all(r.exists() for r in results):
            status = status_json(opts.tree, sock)  # while the ranks hold their memory
        proc.wait(timeout=max(1.0, end - time.monotonic()))
    finally:
        stop_all([proc])
        sampler.stop.set()
        sampler.join()
    ranks = [json.loads(r.read_text()) for r in results if r.exists()]
    pids = {r["pid"] for r in ranks}
    smi = {f"{pid}@{uuid}": b for (pid, uuid), b in sampler.peak.items() if pid in pids}
    row = {"mode": mode, "quota": quota, "extra_gib": extra_gib, "rc": proc.returncode, "ranks": ranks,
           "smi_peak_bytes": smi, "status": status}
    log.say(f"ddp {mode:8} quota {quota or '-':6} +{extra_gib} GiB: rc {proc.returncode} " + "  ".join(
        f"rank {r['rank']} " + (f"{r['busbw_gbs']:.1f} GB/s" if r.get("ok") else f"OOM={r.get('oom')}")
        for r in ranks) + f"  smi {sorted(v >> 20 for v in smi.values())} MiB")
    return row


def ddp_scenarios(opts, log, results):
    rows = results.setdefault("ddp", [])
    for rep in range(opts.reps):
        for mode in ("native", "cuslice") if rep % 2 == 0 else ("cuslice", "native"):
            rows.append(run_ddp(opts, log, mode, opts.quota if mode == "cuslice" else ""))
    rows.append(run_ddp(opts, log, "cuslice", opts.quota, extra_gib=opts.too_big_gib))


def tenant_gpus(status):
    """{tenant: [GPU indices it is shown on]} from `cuslice status --json`."""
    shown = {}
    for g in (status or {}).get("gpus", []):
        for t in g.get("tenants", []):
            shown.setdefault(t["name"], []).append(g["index"])
    return shown


def summarize(opts, results):
    lines = ["# Multi-GPU", ""]
    alone = {}
    for r in results.get("alone", []):
        alone.setdefault(r["mode"], []).append(r["rates"])
    if alone:
        lines += ["## One loop alone on each GPU (GEMMs/s, median over repetitions)", "",
                  "| GPU | native | cuslice | cuslice/native |", "|---|---|---|---|"]
        for g in ("g0", "g1"):
            n = statistics.median(r[g] for r in alone.get("native", []))
            c = statistics.median(r[g] for r in alone.get("cuslice", [])) if alone.get("cuslice") else float("nan")
            lines.append(f"| {g[1]} | {n:.2f} | {c:.2f} | {c / n:.3f} |")
        lines.append("")
    ref = {g: statistics.median(r[g] for r in alone.get("native", [])) for g in ("g0", "g1")} if alone else {}
    for layout in ("pairs", "spanning"):
        rows = results.get(layout)
        if not rows:
            continue
        lines += [f"## {layout}", "",
                  "| mode | rep | GPU | tenant: target → achieved | sum of the pair / one loop alone |",
                  "|---|---|---|---|---|"]
        for r in rows:
            by_gpu = {}
            for wid, tenant, share, gpus, gpu in LAYOUTS[layout]:
                by_gpu.setdefault(gpu, []).append((wid, tenant, share))
            for gpu, members in sorted(by_gpu.items()):
                total = sum(r["rates"][w] for w, _, _ in members)
                cells = ", ".join(f"{t} {s}% → {100 * r['rates'][w] / total:.1f}%" for w, t, s in members)
                lines.append(f"| {r['mode']} | {r['rep']} | {gpu} | {cells} | {total / ref[f'g{gpu}']:.3f} |")
        for r in rows:
            if r["mode"] == "cuslice" and r.get("status"):
                lines.append(f"\n`cuslice status` mid-run (rep {r['rep']}), GPUs each tenant is shown on: "
                             f"{json.dumps(tenant_gpus(r['status']), sort_keys=True)}")
                break
        lines.append("")
    if results.get("ddp"):
        lines += ["## torchrun, 2 processes, DDP then all-reduce of 256 MiB", "",
                  "| mode | quota per GPU | rc | bus bandwidth per rank (GB/s) | driver's figure per process (MiB) | "
                  "tenant's count per GPU (MiB) |", "|---|---|---|---|---|---|"]
        for r in results["ddp"]:
            bw = ", ".join(f"{x['busbw_gbs']:.1f}" if x.get("ok") else ("OOM: " + x.get("error", "")[:60])
                           for x in sorted(r["ranks"], key=lambda x: x["rank"]))
            counted = []
            for g in (r.get("status") or {}).get("gpus", []):
                for t in g.get("tenants", []):
                    if t["name"] == "ddp":
                        counted.append(f"GPU {g['index']}: {t.get('memory_used_bytes', 0) >> 20}")
            lines.append(f"| {r['mode']} | {r['quota'] or '-'}{' +' + str(r['extra_gib']) + ' GiB asked' if r['extra_gib'] else ''}"
                         f" | {r['rc']} | {bw} | {sorted(v >> 20 for v in r['smi_peak_bytes'].values())} | "
                         f"{'; '.join(counted) or '-'} |")
        nat = [x["busbw_gbs"] for r in results["ddp"] if r["mode"] == "native" for x in r["ranks"] if x.get("ok")]
        cus = [x["busbw_gbs"] for r in results["ddp"] if r["mode"] == "cuslice" and not r["extra_gib"]
               for x in r["ranks"] if x.get("ok")]
        if nat and cus:
            lines.append(f"\nbus bandwidth, median: native {statistics.median(nat):.1f} GB/s, cuslice "
                         f"{statistics.median(cus):.1f} GB/s, ratio {statistics.median(cus) / statistics.median(nat):.3f}")
    (opts.out / "multi_gpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cuslice", type=Path, required=True, help="an unpacked tarball or installation")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--only", default="pairs,spanning,ddp")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--quota", default="8GiB")
    p.add_argument("--too-big-gib", type=float, default=10.0, help="asked beyond the run under --quota")
    opts = p.parse_args()
    opts.tree, opts.python = opts.cuslice.resolve(), sys.executable
    opts.only = set(opts.only.split(","))
    opts.out.mkdir(parents=True, exist_ok=True)
    opts.tmp = tempfile.mkdtemp(prefix="cuslice-mgpu-")
    log = Log(opts.out / "multi_gpu.log")
    smi = subprocess.run(["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    log.say(smi)
    if len(smi.splitlines()) < 2:
        log.say("needs two GPUs or more")
        return 2
    results = {"gpus": smi.splitlines(), "duration": opts.duration, "reps": opts.reps}
    try:
        if opts.only & {"pairs", "spanning"}:
            gemm_scenarios(opts, log, results)
        if "ddp" in opts.only:
            ddp_scenarios(opts, log, results)
    finally:
        (opts.out / "multi_gpu.json").write_text(json.dumps(results, indent=1))
    summarize(opts, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
