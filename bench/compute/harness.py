#!/usr/bin/env python3
"""cuslice compute benchmarks: shares, limit, efficiency, priority, handoff,
scheduler CPU and many clients, each run natively and under cuslice, alternately.

Run through bench/run_compute.sh on the GPU machine; see docs/evidence/benchmarks.md ("GPU time
sharing"). Standard library only. Writes OUT/compute.md (the table), OUT/compute.json (every
run's raw results) and OUT/compute.log (every process's output).
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import median, percentile, write_atomic  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "worker.py")
SOCKET = "/tmp/cuslice-bench/cuslice.sock"  # its control socket: /tmp/cuslice-bench-control
SHM_NAME = "/cuslice-bench"
# native: nothing in between; cuslice: the daemon and the hook; mps / mps-cuslice: the same,
# each run under a private MPS control daemon, low-priority tenants' processes at MPS client
# priority BELOW_NORMAL (what MPS itself offers for priority: the hardware schedules the other
# clients' blocks first, inside their kernels too).
MODES = ("native", "cuslice", "mps", "mps-cuslice")


def hooked(mode):
    return mode.endswith("cuslice")


def under_mps(mode):
    return mode.startswith("mps")


# Where a target derived from a run (a bound, a busy fraction) takes its value from: the first
# of these modes that has one.
TARGET_MODES = ("cuslice", "mps-cuslice", "mps", "native")
GROUPS = ("shares", "efficiency", "limit", "priority", "adversarial", "handoff", "handoff2", "cpu", "many")
REFERENCE_NATIVE = {  # native figures of an earlier H100 measurement, beside this run's native ones
    "efficiency": "0.96", "p99x_train": "2.25", "kept_train": "0.85", "p99x_gemm": "2.0",
}

# Measured seconds per trial, default and --quick. Each trial's workers warm up first (not
# counted); `startup` is the budget's estimate of that, in seconds.
DURATIONS = {  # start-up: seen natively on the H100, 2026-11-22 (many_64: a guess)
    #                 default quick startup
    "gemm_solo":       (6,    5,    6),
    "shares_70_30":    (15,   8,    5),
    "shares_50_30_20": (12,   8,    5),
    "limit_30":        (10,   6,    6),
    "svc_alone":       (10.5, 10.5, 13),
    "train_alone":     (6,    5,    20),
    "svc_train":       (10.5, 10.5, 20),
    "idle_train":      (6,    5,    20),
    "svc_gemm":        (10.5, 10.5, 15),
    "probe_alone":     (4,    3,    4),
    "probe_gemm":      (6,    5,    4),
    "probe_gemm_side": (6,    5,    4),
    "many_1":          (4,    4,    4),
    "many_64":         (8,    5,    30),
}


class T:  # a tenant of the daemon's configuration
    def __init__(self, name, priority=None, share=None, limit=None):
        self.name, self.priority, self.share, self.limit = name, priority, share, limit


class W:  # a worker process
    def __init__(self, wid, kind, tenant, args=()):
        self.id, self.kind, self.tenant, self.args = wid, kind, tenant, list(args)


class Trial:
    def __init__(self, name, groups, tenants, workers, native=True):
        self.name, self.groups, self.tenants, self.workers = name, set(groups), tenants, workers
        self.native = native


def trials(opts):
    gd = ["--depth", str(opts.gemm_depth)]
    gemm = lambda wid, tenant: W(wid, "gemm", tenant, gd)  # noqa: E731
    return [
        Trial("gemm_solo", GROUPS[:-1], [T("solo")], [gemm("g", "solo")]),
        Trial("shares_70_30", ["shares", "efficiency", "cpu"], [T("a", share=70), T("b", share=30)],
              [gemm("a", "a"), gemm("b", "b")]),
        Trial("shares_50_30_20", ["shares", "efficiency", "cpu"],
              [T("a", share=50), T("b", share=30), T("c", share=20)],
              [gemm("a", "a"), gemm("b", "b"), gemm("c", "c")]),
        Trial("limit_30", ["limit", "cpu"], [T("capped", limit=30)], [gemm("g", "capped")], native=False),
        Trial("svc_alone", ["priority", "adversarial", "cpu"], [T("service", priority="high")],
              [W("svc", "service", "service")]),
        Trial("train_alone", ["priority"], [T("trainer", priority="low")], [W("tr", "trainer", "trainer")]),
        Trial("svc_train", ["priority", "cpu"], [T("service", priority="high"), T("trainer", priority="low")],
              [W("svc", "service", "service"), W("tr", "trainer", "trainer")]),
        # The trainer beside a registered service that is idle (a request every 2 s): what the
        # bound below a higher-priority tenant costs with no preemption to pay for.
        Trial("idle_train", ["priority"], [T("service", priority="high"), T("trainer", priority="low")],
              [W("svc", "service", "service", ["--interval", "2"]), W("tr", "trainer", "trainer")]),
        Trial("svc_gemm", ["adversarial", "cpu"], [T("service", priority="high"), T("bulk", priority="low")],
              [W("svc", "service", "service"), gemm("g", "bulk")]),
        Trial("probe_alone", ["handoff"], [T("probe", priority="high")], [W("p", "probe", "probe")]),
        Trial("probe_gemm", ["handoff", "cpu"], [T("probe", priority="high"), T("bulk", priority="low")],
              [W("p", "probe", "probe"), gemm("g", "bulk")]),
        # The same with the bulk tenant's small kernels on a second stream beside its GEMMs:
        # what one stream's progress says of the other's.
        Trial("probe_gemm_side", ["handoff2"], [T("probe", priority="high"), T("bulk", priority="low")],
              [W("p", "probe", "probe"), W("g", "gemm", "bulk", gd + ["--side", "8"])]),
        Trial("many_1", ["many"], [T("c00")], [W("c00", "small", "c00")]),
        Trial("many_64", ["many", "cpu"], [T(f"c{i:02d}") for i in range(64)],
              [W(f"c{i:02d}", "small", f"c{i:02d}") for i in range(64)]),
    ]


# ---------------------------------------------------------------------------------------------
# Running one trial in one mode

class Log:
    def __init__(self, path):
        self.f = open(path, "a")

    def section(self, title, text):
        self.f.write(f"\n===== {title}\n{text}")
        if text and not text.endswith("\n"):
            self.f.write("\n")
        self.f.flush()


def tail_file(path, lines=150):
    try:
        with open(path, errors="replace") as f:
            content = f.readlines()
    except FileNotFoundError:
        return ""
    if len(content) > lines:
        content = [f"[... {len(content) - lines} lines left out]\n"] + content[-lines:]
    return "".join(content)


def config_yaml(trial, opts):
    # Without --quantum, the daemon's default (status JSON records what it was).
    sched = ([f"  quantum: {opts.quantum}"] if opts.quantum else []) + \
        ([f"  limit_window: {opts.limit_window}"] if opts.limit_window else []) + \
        ([f"  lower_priority_timeslice: {opts.lower_timeslice}"] if opts.lower_timeslice else [])
    out = ["scheduler:"] + sched if sched else []
    out.append("tenants:")
    for t in trial.tenants:
        out.append(f"  - name: {t.name}")
        if t.priority:
            out.append(f"    priority: {t.priority}")
        comp = []
        if t.share is not None:
            comp.append(f"share: {t.share}%")
        if t.limit is not None:
            comp.append(f"limit: {t.limit}%")
        if comp:
            out.append("    compute: {" + ", ".join(comp) + "}")
    return "\n".join(out) + "\n"


def proc_cpu_s(pid):
    """utime + stime of pid in seconds, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def proc_cpu_ns(pid):
    """CPU time of every thread of pid in ns from /proc/pid/task/*/schedstat (ns resolution,
    where /proc/pid/stat counts 10 ms ticks), or None. Threads that exited are not counted."""
    total, seen = 0, False
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
                    seen = True
            except (OSError, IndexError, ValueError):
                pass
    except OSError:
        return None
    return total if seen else None


def proc_rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def socket_answers(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.settimeout(0.2)
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


class Daemon:
    def __init__(self, opts, trial, workdir, log):
        self.opts, self.log = opts, log
        self.cfg = os.path.join(workdir, "cuslice.yaml")
        write_atomic(self.cfg, config_yaml(trial, opts))
        self.logpath = os.path.join(workdir, "daemon.log")
        os.makedirs(os.path.dirname(SOCKET), exist_ok=True)
        if socket_answers(SOCKET):
            raise RuntimeError(f"another daemon answers on {SOCKET}")
        exe = os.path.join(opts.cuslice, "bin", "cuslice-scheduler")
        cmd = [exe, "--config", self.cfg, "--socket", SOCKET, "--shm-name", SHM_NAME,
               "--log-level", opts.daemon_log_level]
        self.t_start = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=open(self.logpath, "w"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not (os.path.exists(SOCKET) and os.path.exists("/dev/shm" + SHM_NAME)):
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}:\n{tail_file(self.logpath, 20)}")
            if time.monotonic() > deadline:
                raise RuntimeError("daemon did not publish its socket and segment within 10 s")
            time.sleep(0.02)
        self.cpu_start = proc_cpu_s(self.proc.pid)
        self.ns_start = proc_cpu_ns(self.proc.pid)

    def sample(self):
        return proc_cpu_s(self.proc.pid), proc_cpu_ns(self.proc.pid), time.monotonic()

    def stop(self):
        info = {"pid": self.proc.pid}
        cpu_end = proc_cpu_s(self.proc.pid)
        ns_end = proc_cpu_ns(self.proc.pid)
        if ns_end is not None and self.ns_start is not None:
            info["cpu_total_ns"] = ns_end - self.ns_start
        wall = time.monotonic() - self.t_start
        info["rss_kib"] = proc_rss_kib(self.proc.pid)
        if cpu_end is not None and self.cpu_start is not None:
            info["cpu_total_s"] = round(cpu_end - self.cpu_start, 4)
            info["cpu_total_pct"] = round(100.0 * (cpu_end - self.cpu_start) / wall, 3)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                info["killed"] = True
        info["exit"] = self.proc.returncode
        text = tail_file(self.logpath, 400)
        try:
            with open(self.logpath, errors="replace") as f:
                full = f.read()
        except OSError:
            full = ""
        info["registered"] = full.count("joined tenant")
        info["refused"] = full.count("refused")
        self.log.section("daemon log", text)
        return info


def cuslice_status(opts):
    """`cuslice status --json` of the benchmark's daemon (what the hooks and the daemon wrote
    into the segment: per-tenant GPU seconds, token waits and grants, handoffs), or {"error"}."""
    exe = os.path.join(opts.cuslice, "bin", "cuslice")
    try:
        r = subprocess.run([exe, "status", "--json", "--socket", SOCKET, "--shm-name", SHM_NAME],
                           capture_output=True, text=True, timeout=5)
        if r.returncode != 0:
            return {"error": (r.stderr or r.stdout).strip()[:300]}
        return json.loads(r.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        return {"error": f"{type(e).__name__}: {e}"}


def status_delta(a, b, seconds):
    """What changed between two status documents on the first GPU, per second of wall time."""
    try:
        g0, g1 = a["gpus"][0], b["gpus"][0]
        before = {t["name"]: t for t in g0["tenants"]}
        out = {"handoffs_per_s": (g1["token_handoffs"] - g0["token_handoffs"]) / seconds, "tenants": {}}
        for t in g1["tenants"]:
            p = before.get(t["name"], {})
            out["tenants"][t["name"]] = {
                k: (t.get(k, 0) - p.get(k, 0)) / seconds
                for k in ("gpu_seconds", "token_wait_seconds", "token_grants") if t.get(k) is not None}
        out["gpu_seconds_per_s"] = sum(t.get("gpu_seconds", 0) for t in out["tenants"].values())
        return out
    except (KeyError, IndexError, TypeError, ZeroDivisionError):
        return None


class Mps:
    """A private MPS control daemon for one run (its own pipe and log folders), stopped after."""

    def __init__(self, workdir, log):
        self.log = log
        self.pipe, self.logdir = os.path.join(workdir, "mps-pipe"), os.path.join(workdir, "mps-log")
        os.makedirs(self.pipe)
        os.makedirs(self.logdir)
        self.env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=self.pipe, CUDA_MPS_LOG_DIRECTORY=self.logdir)
        r = subprocess.run(["nvidia-cuda-mps-control", "-d"], env=self.env, capture_output=True, text=True,
                           timeout=20)
        if r.returncode != 0:
            raise RuntimeError(f"nvidia-cuda-mps-control -d exited with {r.returncode}: {r.stdout}{r.stderr}")

    def client_env(self, priority):
        env = {"CUDA_MPS_PIPE_DIRECTORY": self.pipe, "CUDA_MPS_LOG_DIRECTORY": self.logdir}
        env["CUDA_MPS_CLIENT_PRIORITY"] = "1" if priority == "low" else "0"
        return env

    def stop(self):
        pidfile = os.path.join(self.pipe, "nvidia-cuda-mps-control.pid")
        try:
            with open(pidfile) as f:
                pid = int(f.read().strip())
        except (OSError, ValueError):
            pid = None
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", env=self.env, capture_output=True,
                       text=True, timeout=20)
        deadline = time.monotonic() + 20
        while pid and time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except OSError:
                break
            time.sleep(0.05)
        for name in ("control.log", "server.log"):
            text = tail_file(os.path.join(self.logdir, name), 30)
            if text.strip():
                self.log.section(f"MPS {name}", text)


def worker_env(mode, tenant, opts, priority=None, mps=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSLICE_") and not k.startswith("CUDA_MPS_")}
    pre = [p for p in env.get("LD_PRELOAD", "").split(":") if p and "libcuslice" not in p]
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    if mps:
        env.update(mps.client_env(priority))
    if hooked(mode):
        pre.insert(0, os.path.join(opts.cuslice, "lib", "libcuslice.so"))
        env.update(CUSLICE_SOCKET=SOCKET, CUSLICE_TENANT=tenant)
        # The hook's own settings, when the caller sets them.
        for var in ("CUSLICE_LOG_LEVEL", "CUSLICE_MAX_QUEUED", "CUSLICE_PREEMPT_QUEUED", "CUSLICE_PARK_QUEUED"):
            if os.environ.get(var):
                env[var] = os.environ[var]
    if pre:
        env["LD_PRELOAD"] = ":".join(pre)
    else:
        env.pop("LD_PRELOAD", None)
    return env


def run_trial(trial, mode, rep, duration, opts, log):
    rec = {"trial": trial.name, "mode": mode, "rep": rep, "duration": duration, "ok": False}
    workdir = os.path.join(opts.tmp, f"{trial.name}-{mode}-{rep}")
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    daemon, mps, procs, warnings = None, None, [], []
    t_begin = time.monotonic()
    prio = {t.name: t.priority for t in trial.tenants}
    try:
        if under_mps(mode):
            mps = Mps(workdir, log)
        if hooked(mode):
            daemon = Daemon(opts, trial, workdir, log)
        for w in trial.workers:
            cmd = [opts.python, WORKER, w.kind, "--id", w.id, "--sync", workdir,
                   "--duration", str(duration)] + w.args + (["--fake"] if opts.fake else [])
            out = open(os.path.join(workdir, f"log.{w.id}"), "w")
            procs.append((w, subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL,
                                              env=worker_env(mode, w.tenant, opts, prio.get(w.tenant), mps))))
        ready_timeout = 120 if len(procs) > 8 else 60
        deadline = time.monotonic() + ready_timeout
        while True:
            waiting = [w.id for w, _ in procs if not os.path.exists(os.path.join(workdir, f"ready.{w.id}"))]
            if not waiting:
                break
            dead = [(w, p.returncode) for w, p in procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"worker {dead[0][0].id} exited with {dead[0][1]} before it was ready")
            if time.monotonic() > deadline:
                raise RuntimeError(f"workers {waiting[:5]} not ready after {ready_timeout} s")
            time.sleep(0.05)
        rec["startup_s"] = round(time.monotonic() - t_begin, 2)
        t0 = time.monotonic() + (2.0 if len(procs) > 8 else 1.0)
        write_atomic(os.path.join(workdir, "go"), repr(t0))
        if daemon:
            time.sleep(max(0.0, t0 - time.monotonic()))
            c0, n0, w0 = daemon.sample()
            st0 = cuslice_status(opts)
            time.sleep(max(0.0, t0 + duration - time.monotonic()))
            c1, n1, w1 = daemon.sample()
            st1 = cuslice_status(opts)
            rec["status_end"] = st1
            delta = status_delta(st0, st1, duration)
            if delta is not None:
                rec["status_window"] = delta
                if delta["gpu_seconds_per_s"] == 0:
                    warnings.append("the hooks reported no GPU time to the daemon during the window "
                                    f"(token handoffs {delta['handoffs_per_s']:.1f}/s): launches were not gated?")
            elif "error" in st1:
                rec["status_error"] = st1["error"]
            elif st1.get("gpus") == []:
                warnings.append("the segment lists no GPU: no hook reported a device to the daemon")
            if c0 is not None and c1 is not None:  # /proc/pid/stat: 10 ms ticks
                rec["daemon_cpu_stat_pct"] = round(100.0 * (c1 - c0) / (w1 - w0), 3)
            if n0 is not None and n1 is not None:  # schedstat: ns
                rec["daemon_cpu_window_pct"] = round(100.0 * (n1 - n0) / 1e9 / (w1 - w0), 4)
            elif "daemon_cpu_stat_pct" in rec:
                rec["daemon_cpu_window_pct"] = rec["daemon_cpu_stat_pct"]
        end = t0 + duration + 30
        for w, p in procs:
            try:
                p.wait(max(1.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        results, errors = {}, []
        for w, p in procs:
            try:
                with open(os.path.join(workdir, f"result.{w.id}.json")) as f:
                    r = json.load(f)
            except (OSError, ValueError):
                r = {"ok": False, "error": f"no result (exit {p.returncode})"}
            r["tenant"] = w.tenant
            results[w.id] = r
            if not r.get("ok"):
                errors.append(f"{w.id}: {r.get('error')}")
        rec["workers"] = results
        rec["ok"] = not errors
        if errors:
            rec["error"] = "; ".join(errors[:3])
    except Exception as e:  # noqa: BLE001 - recorded, the run goes on with the next trial
        rec["error"] = f"{type(e).__name__}: {e}"
    finally:
        for w, p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if mps:
            mps.stop()
        if daemon:
            rec["daemon"] = daemon.stop()
            if rec.get("status_window"):
                log.section(f"{trial.name} {mode} rep {rep}: segment changes per second of the window",
                            json.dumps(rec["status_window"], indent=1))
            n = len(trial.workers)
            if rec["daemon"].get("registered", 0) < n:
                warnings.insert(0, f"only {rec['daemon'].get('registered', 0)} of {n} workers registered "
                                "with the daemon: cuslice did not gate this run")
        if warnings:
            rec["warning"] = "; ".join(warnings)
        rec["wall_s"] = round(time.monotonic() - t_begin, 2)
        for w, _ in procs:
            text = tail_file(os.path.join(workdir, f"log.{w.id}"), 60)
            if text.strip() and (len(procs) <= 8 or not rec["ok"]):
                log.section(f"{trial.name} {mode} rep {rep} worker {w.id} ({w.kind})", text)
        if opts.keep_tmp is False:
            shutil.rmtree(workdir, ignore_errors=True)
    return rec


# ---------------------------------------------------------------------------------------------
# Metrics: every metric yields, per repetition, (value, sub-values). One repetition: the cell
# is value (min-max of the sub-values: 1 s windows, or quarters of the requests). Several:
# median of the values (min-max of the values).

def reps(records, trial, mode):
    return [r for r in records if r["trial"] == trial and r["mode"] == mode and r["ok"]]


def cell(per_rep):
    per_rep = [(v, s) for v, s in per_rep if v is not None]
    if not per_rep:
        return None
    if len(per_rep) == 1:
        v, subs = per_rep[0]
        subs = [x for x in subs if x is not None]
        return (v, min(subs) if subs else v, max(subs) if subs else v)
    vals = [v for v, _ in per_rep]
    return (median(vals), min(vals), max(vals))


def quarters(xs):
    n = len(xs)
    return [xs[i * n // 4:(i + 1) * n // 4] for i in range(4)] if n >= 8 else [xs]


def rate_rep(r, wid, scale=1.0):
    w = r["workers"][wid]
    per_window = [c * w.get("items_per_unit", 1) / w["window"] for c in w["counts"]]
    return (w["rate_items_s"] * scale, [x * scale for x in per_window])


def lat_rep(r, wid, q):
    lat = r["workers"][wid]["latency_ms"]
    return (percentile(lat, q), [percentile(part, q) for part in quarters(lat)])


class Metrics:
    def __init__(self, records):
        self.records = records

    def m(self, trial, mode, fn):
        return cell([fn(r) for r in reps(self.records, trial, mode)])

    def value(self, trial, mode, fn):
        c = self.m(trial, mode, fn)
        return c[0] if c else None

    def any_value(self, trial, fn):
        """The first mode's value that has one, cuslice first: for targets derived from a run."""
        for mode in TARGET_MODES:
            v = self.value(trial, mode, fn)
            if v is not None:
                return v
        return None


def build_rows(records, modes):
    M = Metrics(records)
    rows = []

    def add(scenario, metric, fn_by_mode, target="—", check=None, native_note=None, fmt="{:.3g}"):
        cells = {mode: fn_by_mode(mode) for mode in MODES}
        rows.append({"scenario": scenario, "metric": metric, "cells": cells, "target": target,
                     "check": check, "native_note": native_note, "fmt": fmt})

    def solo(mode):
        return M.value("gemm_solo", mode, lambda r: rate_rep(r, "g"))

    def solo_ms(mode="native"):
        s = solo(mode) or solo("cuslice")
        if s:
            return 1000.0 / s
        for r in records:
            if r["trial"] == "gemm_solo" and r["ok"]:
                return r["workers"]["g"].get("warm", {}).get("gemm_ms")
        return None

    add("gemm solo (8192² bf16)", "GEMMs/s", lambda mo: M.m("gemm_solo", mo, lambda r: rate_rep(r, "g")),
        fmt="{:.1f}")
    add("gemm solo", "ms per GEMM (1/rate)",
        lambda mo: (lambda s: (1000.0 / s, 1000.0 / s, 1000.0 / s) if s else None)(solo(mo)), fmt="{:.3f}")

    for trial, shares in (("shares_70_30", {"a": 70, "b": 30}), ("shares_50_30_20", {"a": 50, "b": 30, "c": 20})):
        label = "shares " + "/".join(str(v) for v in shares.values())
        for wid, target in shares.items():
            add(label, f"tenant {wid}: % of solo",
                lambda mo, wid=wid: (lambda s: M.m(trial, mo, lambda r: rate_rep(r, wid, 100.0 / s)) if s else None)(solo(mo)),
                target=f"{target} ± 1", check=lambda v, t=target: abs(v - t) <= 1.0, fmt="{:.1f}")

        def eff(mo, trial=trial, shares=shares):
            base = solo("native") or solo(mo)
            if not base:
                return None

            def fn(r):
                ws = [r["workers"][w] for w in shares]
                total = sum(w["rate_items_s"] for w in ws) / base
                per = [sum(w["counts"][k] for w in ws) / ws[0]["window"] / base for k in range(len(ws[0]["counts"]))]
                return (total, per)
            return M.m(trial, mo, fn)
        add(label, "efficiency: sum / native solo", eff, target="≥ 0.99", check=lambda v: v >= 0.99,
            native_note=REFERENCE_NATIVE["efficiency"] if trial == "shares_70_30" else None, fmt="{:.3f}")

    add("limit 30%", "% of solo",
        lambda mo: (lambda s: M.m("limit_30", mo, lambda r: rate_rep(r, "g", 100.0 / s)) if s else None)(solo(mo)),
        target="30 ± 1", check=lambda v: abs(v - 30) <= 1.0, fmt="{:.1f}")
    # What the cap itself controls: GPU time, as the hooks reported it to the daemon. Alone
    # under a cap the GPU idles most of the time, and its clocks are higher in the slices
    # than in a solo run held at the power limit, so throughput can exceed the time share.
    add("limit 30%", "GPU time, % of wall (the daemon's count)",
        lambda mo: M.m("limit_30", mo, lambda r: (
            100.0 * r["status_window"]["tenants"]["capped"]["gpu_seconds"]
            if "capped" in (r.get("status_window") or {}).get("tenants", {}) else None, []))
        if mo == "cuslice" else None, fmt="{:.1f}")

    # priority: inference service beside a trainer
    def svc(trial, q):
        return lambda mo: M.m(trial, mo, lambda r: lat_rep(r, "svc", q))

    def p99x(trial):
        def f(mo):
            alone = M.value("svc_alone", mo, lambda r: lat_rep(r, "svc", 99))
            if not alone:
                return None
            return M.m(trial, mo, lambda r: (lambda v, subs: (v / alone, [x / alone for x in subs]))(*lat_rep(r, "svc", 99)))
        return f

    def busy(mo):
        vals = [r["workers"]["svc"].get("gpu_ms_mean", 0) / r["workers"]["svc"]["interval_ms"]
                for r in reps(records, "svc_alone", mo)]
        return median(vals) if vals else None

    add("service alone (ResNet-50 b8 fp16, graph)", "p50 latency ms", svc("svc_alone", 50), fmt="{:.3f}")
    add("service alone", "p99 latency ms", svc("svc_alone", 99), fmt="{:.3f}")
    add("service alone", "GPU busy (GPU ms / 10 ms)",
        lambda mo: (lambda b: (b, b, b) if b is not None else None)(busy(mo)), fmt="{:.3f}")
    add("service + trainer", "p50 latency ms", svc("svc_train", 50), fmt="{:.3f}")
    add("service + trainer", "p99 latency ms", svc("svc_train", 99), fmt="{:.3f}")
    add("service + trainer", "p99 / p99 alone", p99x("svc_train"), target="≤ 1.10",
        check=lambda v: v <= 1.10, native_note=REFERENCE_NATIVE["p99x_train"], fmt="{:.2f}")
    add("trainer alone (ResNet-50 b64 AMP)", "images/s", lambda mo: M.m("train_alone", mo, lambda r: rate_rep(r, "tr")),
        fmt="{:.0f}")

    def kept(mo):
        alone = M.value("train_alone", mo, lambda r: rate_rep(r, "tr"))
        if not alone:
            return None
        return M.m("svc_train", mo, lambda r: rate_rep(r, "tr", 1.0 / alone))
    b_cus = next((b for b in map(busy, TARGET_MODES) if b is not None), None)
    kept_target = f"≥ 1 − busy − 0.02 = {1 - b_cus - 0.02:.3f}" if b_cus is not None else "≥ 1 − service busy − 0.02"
    add("service + trainer", "trainer kept (vs alone)", kept, target=kept_target,
        check=(lambda v: v >= 1 - b_cus - 0.02) if b_cus is not None else None,
        native_note=REFERENCE_NATIVE["kept_train"], fmt="{:.3f}")
    add("idle service + trainer", "trainer kept (vs alone)",
        lambda mo: (lambda alone: M.m("idle_train", mo, lambda r: rate_rep(r, "tr", 1.0 / alone)) if alone else None)(
            M.value("train_alone", mo, lambda r: rate_rep(r, "tr"))), fmt="{:.3f}")

    tk = solo_ms()
    add("service + GEMM loop", "p99 latency ms", svc("svc_gemm", 99), fmt="{:.3f}")
    bound_x = None
    a_cus = M.any_value("svc_alone", lambda r: lat_rep(r, "svc", 99))
    if tk and a_cus:
        bound_x = (a_cus + tk) / a_cus
    add("service + GEMM loop", "p99 / p99 alone", p99x("svc_gemm"),
        target=f"≤ (alone + 1 GEMM)/alone = {bound_x:.2f}" if bound_x else "≤ (alone + 1 GEMM)/alone",
        check=(lambda v: v <= bound_x) if bound_x else None, native_note=REFERENCE_NATIVE["p99x_gemm"], fmt="{:.2f}")

    def gemm_kept(mo):
        s = solo(mo)
        return M.m("svc_gemm", mo, lambda r: rate_rep(r, "g", 1.0 / s)) if s else None
    add("service + GEMM loop", "GEMM loop kept (vs solo)", gemm_kept, fmt="{:.3f}")

    # handoff: a high-priority tiny kernel while a low-priority GEMM loop holds the GPU
    for trial, label in (("probe_alone", "probe alone"), ("probe_gemm", "handoff: probe + GEMM loop"),
                         ("probe_gemm_side", "handoff: probe + GEMM loop, side stream")):
        add(label, "p50 submit→done ms", lambda mo, t=trial: M.m(t, mo, lambda r: lat_rep(r, "p", 50)), fmt="{:.3f}")
        p_alone = M.any_value("probe_alone", lambda r: lat_rep(r, "p", 99))
        if trial != "probe_alone" and tk and p_alone is not None:
            bound = p_alone + tk
            add(label, "p99 submit→done ms", lambda mo, t=trial: M.m(t, mo, lambda r: lat_rep(r, "p", 99)),
                target=f"≤ alone + 1 GEMM = {bound:.2f}", check=lambda v, b=bound: v <= b, fmt="{:.3f}")
        else:
            add(label, "p99 submit→done ms", lambda mo, t=trial: M.m(t, mo, lambda r: lat_rep(r, "p", 99)), fmt="{:.3f}")

    # scheduler CPU (cuslice only)
    cpu = {}
    for r in records:
        if r["mode"] == "cuslice" and r.get("daemon_cpu_window_pct") is not None:
            cpu.setdefault(r["trial"], []).append(r["daemon_cpu_window_pct"])
    for trial in ("shares_70_30", "svc_gemm", "many_64"):
        if trial in cpu:
            add("scheduler CPU", f"% of a core during {trial}",
                lambda mo, t=trial: (lambda v: (median(v), min(v), max(v)))(cpu[t]) if mo == "cuslice" else None,
                fmt="{:.3f}")
    for trial in ("shares_70_30", "svc_gemm", "many_64"):
        for key, label in (("handoffs_per_s", "token handoffs per s"),
                           ("gpu_seconds_per_s", "GPU s reported to the daemon per s")):
            vals = [r["status_window"][key] for r in records
                    if r["trial"] == trial and r["mode"] == "cuslice" and r.get("status_window")]
            if vals:
                add("scheduler", f"{label} during {trial}",
                    lambda mo, v=vals: (median(v), min(v), max(v)) if mo == "cuslice" else None, fmt="{:.3g}")
    if cpu:
        allv = [median(v) for v in cpu.values()]
        add("scheduler CPU", f"% of a core, max over {len(cpu)} scenarios",
            lambda mo: (max(allv), min(allv), max(allv)) if mo == "cuslice" else None, fmt="{:.3f}")

    # many clients
    def progressing(mo):
        return M.m("many_64", mo, lambda r: (sum(1 for w in r["workers"].values() if w.get("units", 0) > 0), []))

    def total_vs_one(mo):
        one = M.value("many_1", mo, lambda r: rate_rep(r, "c00"))
        if not one:
            return None

        def fn(r):
            ws = list(r["workers"].values())
            per = [sum(w["counts"][k] for w in ws) / ws[0]["window"] / one for k in range(len(ws[0]["counts"]))]
            return (sum(w["rate_items_s"] for w in ws) / one, per)
        return M.m("many_64", mo, fn)

    def fairness(mo):
        def fn(r):
            rates = [w["rate_items_s"] for w in r["workers"].values()]
            return (min(rates) / max(rates) if max(rates) > 0 else 0.0, [])
        return M.m("many_64", mo, fn)
    add("1 small client", "iterations/s", lambda mo: M.m("many_1", mo, lambda r: rate_rep(r, "c00")), fmt="{:.0f}")
    add("64 small clients", "clients that progressed", progressing, target="64", check=lambda v: v >= 64, fmt="{:.0f}")
    add("64 small clients", "total / 1 client", total_vs_one, fmt="{:.3f}")
    add("64 small clients", "slowest / fastest client", fairness, fmt="{:.3f}")
    add("64 small clients", "start-up s (all ready)",
        lambda mo: M.m("many_64", mo, lambda r: (r.get("startup_s"), [])), fmt="{:.1f}")
    return [r for r in rows if any(r["cells"][m] for m in MODES)]


def fmt_cell(c, fmt):
    if c is None:
        return None
    v, lo, hi = c
    s = fmt.format(v)
    if lo is not None and hi is not None and (fmt.format(lo) != s or fmt.format(hi) != s):
        s += f" ({fmt.format(lo)}–{fmt.format(hi)})"
    return s


def table(rows, modes):
    shown = [m for m in MODES if m in modes]
    others = [m for m in shown if m != "native"]
    out = ["| scenario | metric | " + " | ".join(f"{m} median (spread)" for m in shown) + " | "
           + "".join(f"{m}/native | " for m in others) + "target | met? |",
           "|---|---|" + "---|" * (len(shown) + len(others)) + "---|---|"]
    for r in rows:
        n = r["cells"]["native"]
        cols = []
        for m in shown:
            c = r["cells"][m]
            txt = fmt_cell(c, r["fmt"]) or "—"
            if m == "native" and r["native_note"] and c:
                txt += f" [ref: {r['native_note']}]"
            cols.append(txt)
        ratios = [f"{r['cells'][m][0] / n[0]:.3f}" if (n and r["cells"][m] and n[0]) else "—" for m in others]
        met = []
        for m in others:
            if r["check"] and r["cells"][m]:
                ok = r["check"](r["cells"][m][0])
                met.append(("yes" if ok else "**no**") + (f" ({m})" if len(others) > 1 else ""))
        out.append(f"| {r['scenario']} | {r['metric']} | " + " | ".join(cols) + " | "
                   + "".join(f"{x} | " for x in ratios) + f"{r['target']} | {', '.join(met) or '—'} |")
    return "\n".join(out)


def report(opts, info, modes, records, skipped, budget, t_start, final):
    rows = build_rows(records, modes)
    md = [f"# cuslice compute benchmarks, {info['date_utc']} UTC" + ("" if final else " (partial: still running)"),
          "", f"GPU: {info.get('gpu')}; python {info['python']}; modes: {', '.join(modes)}; "
          f"{'quick' if opts.quick else 'default'} durations; {opts.reps} repetition(s); GEMM depth {opts.gemm_depth}"]
    torch_v = next((w.get("warm", {}).get("torch") for r in records for w in r.get("workers", {}).values()
                    if w.get("warm", {}).get("torch")), None)
    if torch_v:
        md[-1] += f"; torch {torch_v}"
    if info.get("cuslice"):
        md.append(f"cuslice: {info['cuslice']}")
    md += ["", "Spread: with one repetition, min–max over 1 s windows (throughputs) or over quarters of the "
           "requests (latency percentiles); with several, min–max over repetitions. "
           "[ref: x] is the native figure of an earlier H100 measurement.", "", table(rows, modes), ""]
    for r in records:
        if not r["ok"]:
            md.append(f"- FAILED {r['trial']} {r['mode']} rep {r['rep']}: {r.get('error')}")
    for r in records:
        if r.get("warning"):
            md.append(f"- WARNING {r['trial']} {r['mode']} rep {r['rep']}: {r['warning']}")
    if skipped:
        md.append(f"- skipped for the time budget ({budget:.0f} s): {', '.join(skipped)}")
    md.append(f"- total wall time {time.monotonic() - t_start:.0f} s")
    text = "\n".join(md) + "\n"
    write_atomic(os.path.join(opts.out, "compute.md"), text)
    raw = {"machine": info, "options": dict(vars(opts)), "modes": modes, "final": final,
           "records": records, "skipped": skipped,
           "rows": [{k: v for k, v in r.items() if k != "check"} for r in rows]}
    write_atomic(os.path.join(opts.out, "compute.json"), json.dumps(raw, default=str))
    if final:
        print()
        print(text, flush=True)


# ---------------------------------------------------------------------------------------------

def machine_info(opts):
    info = {"date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
            "host": socket.gethostname(), "python": sys.version.split()[0]}
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        info["gpu"] = q.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        info["gpu"] = "unknown (no nvidia-smi)"
    if opts.cuslice:
        try:
            v = subprocess.run([os.path.join(opts.cuslice, "bin", "cuslice"), "version"],
                               capture_output=True, text=True, timeout=20)
            info["cuslice"] = f"{opts.cuslice}: {v.stdout.strip().splitlines()[0] if v.stdout.strip() else '?'}"
        except (OSError, subprocess.SubprocessError):
            info["cuslice"] = opts.cuslice
    return info


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--only", default="", help=f"comma-separated groups: {', '.join(GROUPS)} (or trial names)")
    p.add_argument("--native-only", action="store_true")
    p.add_argument("--cuslice-only", action="store_true")
    p.add_argument("--modes", default="", help=f"comma-separated, in place of the two above: {', '.join(MODES)} "
                   "(mps*: each run under a private MPS daemon, low-priority tenants at client priority 1)")
    p.add_argument("--quick", action="store_true", help="shorter measurements")
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--cuslice", default="", help="folder with bin/cuslice, bin/cuslice-scheduler and "
                   "lib/libcuslice.so (bench/run_compute.sh finds it from a tarball or a build folder)")
    p.add_argument("--budget-s", type=float, default=0, help="start no scenario whose runs would end after this many seconds (0: 570, --quick 300)")
    p.add_argument("--quantum", default="", help="scheduler.quantum in the daemon's YAML (default: none, the daemon's own, 100ms)")
    p.add_argument("--limit-window", default="", help="scheduler.limit_window in the daemon's YAML (default: none, the daemon's own, 1s)")
    p.add_argument("--lower-timeslice", default="", help="scheduler.lower_priority_timeslice in the daemon's YAML (default: none, the daemon's own, 200us; off)")
    p.add_argument("--gemm-depth", type=int, default=4, help="GEMMs in flight per GEMM-loop process")
    p.add_argument("--daemon-log-level", default="info")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--tmp", default="/tmp/cuslice-bench")
    p.add_argument("--keep-tmp", action="store_true")
    p.add_argument("--fake", action="store_true", help="workers sleep instead of using the GPU")
    p.add_argument("--list", action="store_true")
    return p.parse_args()


def main():
    opts = parse()
    opts.cuslice = os.path.abspath(opts.cuslice) if opts.cuslice else ""
    all_trials = trials(opts)
    if opts.list:
        for t in all_trials:
            print(f"{t.name:18s} groups: {', '.join(sorted(t.groups))}")
        return 0
    if opts.modes:
        modes = [m.strip() for m in opts.modes.split(",") if m.strip()]
        bad = [m for m in modes if m not in MODES]
        if bad:
            print(f"unknown --modes: {', '.join(bad)}; modes: {', '.join(MODES)}", file=sys.stderr)
            return 2
    else:
        modes = ["native"] if opts.native_only else ["cuslice"] if opts.cuslice_only else ["native", "cuslice"]
    want = {x.strip() for x in opts.only.split(",") if x.strip()}
    unknown = want - set(GROUPS) - {t.name for t in all_trials}
    if unknown:
        print(f"unknown --only names: {', '.join(sorted(unknown))}; groups: {', '.join(GROUPS)}", file=sys.stderr)
        return 2
    selected = [t for t in all_trials if not want or t.groups & want or t.name in want]
    if any(hooked(m) for m in modes):
        exe = os.path.join(opts.cuslice, "bin", "cuslice-scheduler")
        hook = os.path.join(opts.cuslice, "lib", "libcuslice.so")
        if not (opts.cuslice and os.path.exists(exe) and os.path.exists(hook)):
            print(f"no cuslice at {opts.cuslice or '(none given)'} (bin/cuslice-scheduler, lib/libcuslice.so): "
                  "pass --cuslice with the release tarball, an unpacked one or a build folder, "
                  "or --native-only", file=sys.stderr)
            return 2
    budget = opts.budget_s or (300 if opts.quick else 570)
    os.makedirs(opts.out, exist_ok=True)
    os.makedirs(opts.tmp, exist_ok=True)
    log = Log(os.path.join(opts.out, "compute.log"))
    info = machine_info(opts)
    log.section("machine", json.dumps(info, indent=1))
    print(f"# compute benchmarks: modes {'+'.join(modes)}, {len(selected)} trials, "
          f"{'quick' if opts.quick else 'default'} durations, budget {budget:.0f} s; {info.get('gpu')}", flush=True)

    records, skipped = [], []
    t_start = time.monotonic()
    for idx, trial in enumerate(selected):
        dur_default, dur_quick, startup = DURATIONS[trial.name]
        duration = dur_quick if opts.quick else dur_default
        for rep in range(opts.reps):
            order = list(MODES) if (idx + rep) % 2 == 0 else list(reversed(MODES))
            order = [m for m in order if m in modes and (hooked(m) or trial.native)]
            # Both modes of a repetition or neither: a half-measured comparison is no use.
            if time.monotonic() - t_start + len(order) * (startup + duration + 3) > budget:
                skipped += [f"{trial.name}/{m}/{rep}" for m in order]
                continue
            for mode in order:
                rec = run_trial(trial, mode, rep, duration, opts, log)
                records.append(rec)
                status = "ok" if rec["ok"] else f"FAILED: {rec.get('error')}"
                extra = f" daemon {rec['daemon_cpu_window_pct']:.3f}% cpu" if "daemon_cpu_window_pct" in rec else ""
                warn = f" WARNING: {rec['warning']}" if rec.get("warning") else ""
                print(f"[{time.monotonic() - t_start:6.1f}s] {trial.name:16s} {mode:7s} rep {rep}: "
                      f"{status} (start-up {rec.get('startup_s', '?')} s, wall {rec['wall_s']} s){extra}{warn}",
                      flush=True)
                # After every run, so that a call cut off at its time limit still returns a table.
                report(opts, info, modes, records, skipped, budget, t_start, final=False)

    report(opts, info, modes, records, skipped, budget, t_start, final=True)
    failed = [r for r in records if not r["ok"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
