"""Memory preemption by the fast path, on one real GPU: a preemptible trainer holding most of the
card is held while as much of its memory as a high-priority service needs is copied to pinned
host memory, and comes back at the same addresses when the service lets go.

    bash bench/preemption/run.sh --cuslice T --scenario fast [options below]
    python3 bench/preemption/fast.py --cuslice DIR [--out DIR] [--quick] [--checkpoint] [--no-native]
        [--ballast-gib 80] [--service-gib 64 | --must-move-gib G] [--service-seconds 10]
        [--host-pool 24GiB|none] [--gpu 0]

A cuslice-scheduler (DIR/bin, the hook DIR/lib) with two tenants, both joined by name
(CUSLICE_TENANT, `allow_env: true`): `serve` (priority high, a memory quota: --service-gib + 6
GiB, a guarantee) and `train` (priority low, preemptible, `memory: 100%`, `host_pool:
--host-pool`), under `preemption: {fast: true}`.

1. The trainer (workers.py gemm-trainer), in `train`: --ballast-gib tensors of 1 GiB, each
   with a pattern of its own over every element, checked in full once filled; then bf16
   matmuls in a loop, its steps/s reported ten times a second. Once `cuslice status --json`
   says its pinned pool is ready (`host_pool_bytes`) and it has stepped --warmup-s seconds,
2. the service (workers.py alloc-service), in `serve`, creates its context, and the card's free
   memory is read (nvidia-smi): what must move is the service's allocation less that. Then it
   allocates --service-gib GiB at once (torch.empty), timed: the hook holds that call until
   room is made, so its time is the time to room. `cuslice status --json` says which path the
   suspension took and how much it moved off the card. The service fills its memory, holds it
   --service-seconds, frees it (del, empty_cache) and exits.
3. The trainer steps again: the time from the service's free to the end of its first step is
   the resumption as the trainer sees it; its steps/s over the next --recovery-s seconds are set
   against the rate before the service started; then its ballast is checked in full again.

Checks: the service got its memory; the suspension took the fast path; time to room at most
--room-s (3 s); moved at most what had to move + 10%; the trainer stepping again within
--resume-s (3 s) of the free, at 0.95 of its rate within --recovery-s (5 s), its state
`running`; every tensor of the ballast intact, at the start and after; no process died or hung
once the service asked for its memory.

--checkpoint: the same with `fast: false` (the driver's checkpoint: everything moves, about
70 s on an H200 with the default sizes), no pool; checked for the memory, the path, the
resumption and the ballast, its times shown beside the fast path's. Native (unless
--no-native): the same trainer and service without cuslice; the service's allocation fails
with the framework's out-of-memory error, which is reported with the trainer's native rate.

--quick: a first smoke run: --ballast-gib 20, the service sized at run time so that about
--must-move-gib 8 GiB must move (the card's free memory + 8 GiB; `serve`'s quota is then the
card less 4 GiB), --host-pool 12GiB, --service-seconds 5. On an H200 the default sizes should
take about 2 minutes, 4 with --checkpoint (its checkpoint and restore of some 80 GiB alone take
about 70 s), and --quick about 1.

Writes OUT/preemption-fast.json (every figure), OUT/preemption-fast.md (the tables) and each
process's output under OUT/preemption-fast-logs/. Exit status 0 when every check passed, 1 when
one failed, 2 when the run could not be made (no GPU, the scheduler refused the configuration
or did not start, a process died, `cuslice status` without the fast path's fields, a service
that fits beside the trainer)."""
import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time

from harness import GiB, Proc, Scheduler, card, card_free_bytes, parse_size, process_memory_bytes, tenant_status

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.join(HERE, "workers.py")


def config_text(card_bytes, serve_quota_gib, fast, host_pool, allocation_wait_s, resume_holdoff):
    pool = f"    host_pool: {host_pool}\n" if host_pool else ""
    return f"""scheduler:
  gpu_memory: {card_bytes}
  preemption:
    fast: {"true" if fast else "false"}
    allocation_wait: {allocation_wait_s}s
    resume_holdoff: {resume_holdoff}
tenants:
  - name: serve
    priority: high
    memory: {serve_quota_gib}GiB
    allow_env: true
  - name: train
    priority: low
    memory: 100%
    preemptible: true
    allow_env: true
{pool}"""


def worker_env(gpu):
    """The workers' environment: one GPU, by nvidia-smi's numbering; PyTorch's default allocator
    (every tensor of the ballast an allocation of its own); nothing of cuslice's."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CUSLICE_") and k not in ("LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF")}
    env.update({"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": str(gpu), "PYTHONUNBUFFERED": "1"})
    return env


def trainer_argv(a):
    return [a.python, WORKERS, "gemm-trainer", "--ballast-gib", str(a.ballast_gib), "--n", str(a.n),
            "--per-step", str(a.per_step), "--report-s", str(a.report_s), "--stall-s", str(a.stall_s)]


def service_argv(a, gib):
    return [a.python, WORKERS, "alloc-service", "--gib", str(gib), "--seconds", str(a.service_seconds)]


def samples(trainer):
    """(time, steps done) at the end of the steps the trainer reported."""
    out = [(e["t"], e["steps"]) for e in trainer.events if e.get("event") == "rate"]
    out += [(e["t"], e["step"]) for e in trainer.events if e.get("event") == "stall"]
    return sorted(out)


def rate_between(points, t0, t1):
    """Steps/s between the first and the last step end reported within [t0, t1]; None with
    fewer than two."""
    inside = [p for p in points if t0 <= p[0] <= t1]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def steps_at(points, t):
    before = [p[1] for p in points if p[0] <= t]
    return before[-1] if before else 0


def recovered_after(points, resumed_at, before, fraction, horizon_s, window_s=0.5):
    """Seconds from resumed_at to the end of the first window of window_s (slid by 0.1 s) whose
    rate is at least fraction * before, within horizon_s; None if none is."""
    k = 0
    while k * 0.1 + window_s <= horizon_s + 1e-9:
        start = resumed_at + k * 0.1
        rate = rate_between(points, start, start + window_s)
        if rate is not None and rate >= fraction * before:
            return start + window_s - resumed_at
        k += 1
    return None


def wait_host_pool(sched, want, timeout_s):
    """Seconds until `train`'s pinned pool (every process's) is at least `want` bytes."""
    t0 = time.monotonic()
    while True:
        tenant, _ = tenant_status(sched.status(), "train")
        if "host_pool_bytes" not in tenant:
            raise RuntimeError("cuslice status --json shows no host_pool_bytes: this cuslice has no fast path")
        have = tenant["host_pool_bytes"] or 0
        if have >= want:
            return have, time.monotonic() - t0
        if time.monotonic() - t0 > timeout_s:
            raise RuntimeError(f"the trainer's pinned pool is {have} bytes after {timeout_s} s, not {want}")
        time.sleep(0.25)


def train_status(sched, predicate, timeout_s=3.0):
    """`train`'s suspension record and bytes moved both ways, once predicate(suspension) holds or
    timeout_s has passed (the scheduler publishes its status at least twice a second)."""
    end = time.monotonic() + timeout_s
    while True:
        tenant, moved = tenant_status(sched.status(), "train")
        suspension = tenant.get("suspension") or {}
        if predicate(suspension) or time.monotonic() >= end:
            return suspension, moved
        time.sleep(0.1)


def gib(b):
    return None if b is None else b / GiB


def measure_after_go(r, a, sched, trainer, service, fast, wait_s, t_spawn):
    """From the service's allocation on: what cuslice did, into r."""
    try:
        memory = service.wait_event(lambda e: e.get("event") == "memory", wait_s + 60,
                                    "the service's allocation")
    except RuntimeError as e:  # the hook's wait is bounded by allocation_wait: this is cuslice's failure
        r.update(service_got_memory=False, service_error=str(e))
        return
    r.update(service_got_memory=memory["ok"], service_error=memory["error"], time_to_room_s=memory["seconds"])
    points = samples(trainer)
    r["trainer_rate_before"] = rate_between(points, t_spawn - a.warmup_s, t_spawn)
    if memory["ok"]:
        suspension, _ = train_status(sched, lambda s: s.get("state") == "suspended" and s.get("path"))
        r.update(path=suspension.get("path"), moved_out_bytes=suspension.get("moved_out_bytes"),
                 state_while_held=suspension.get("state"), reason_while_held=suspension.get("reason"),
                 suspend_s=suspension.get("suspend_seconds"),
                 trainer_bytes_while_held=process_memory_bytes(trainer.p.pid),
                 card_free_while_held_bytes=card_free_bytes(a.gpu))
        r["driver_moved_bytes"] = r["trainer_bytes"] - r["trainer_bytes_while_held"]
        filled = service.wait_event(lambda e: e.get("event") == "filled", 120, "the service's fill")
        r["service_fill_s"] = filled["seconds"]
        computed = service.wait_event(lambda e: e.get("event") == "computed", 120, "the service's first kernels")
        r.update(service_computed=computed["ok"], service_compute_error=computed.get("error"),
                 service_compute_s=computed["seconds"])
        freed = service.wait_event(lambda e: e.get("event") == "freed", a.service_seconds + 60,
                                   "the service's free")
        r["service_free_s"] = freed["seconds"]
        try:
            back = trainer.wait_event(lambda e: e.get("event") == "stall" and e["ended"] > freed["t"],
                                      a.resume_timeout if fast else max(a.resume_timeout, 300),
                                      "the trainer to step again")
        except RuntimeError as e:
            r["resume_error"] = str(e)
            suspension, _ = train_status(sched, lambda s: False, 0)
            r.update(state_after=suspension.get("state"), reason_after=suspension.get("reason"))
            return
        r.update(trainer_held_from_s=back["began"] - memory["asked"], trainer_stall_s=back["seconds"],
                 resume_s=back["ended"] - freed["t"])
        until = back["ended"] + a.recovery_s + 0.5
        trainer.wait_event(lambda e: e.get("event") == "rate" and e["t"] >= until, a.recovery_s + 60,
                           "the trainer's steps after its resumption")
        points = samples(trainer)
        r["trainer_steps_while_service_held"] = steps_at(points, freed["t"]) - steps_at(points, memory["got"])
        r["trainer_rate_after"] = rate_between(points, back["ended"] + 1, back["ended"] + a.recovery_s)
        if r["trainer_rate_before"]:
            r["recovered_s"] = recovered_after(points, back["ended"], r["trainer_rate_before"], 0.95,
                                               a.recovery_s)
        suspension, moved_both = train_status(sched, lambda s: s.get("state") == "running")
        r.update(state_after=suspension.get("state"), reason_after=suspension.get("reason"),
                 resume_status_s=suspension.get("resume_seconds"),
                 suspensions=suspension.get("suspensions"), moved_both_ways_bytes=moved_both,
                 path_after=suspension.get("path"))
    else:
        suspension, _ = train_status(sched, lambda s: False, 0)
        r.update(state_after=suspension.get("state"), reason_after=suspension.get("reason"))
    service.p.wait(timeout=60)
    trainer.p.send_signal(signal.SIGUSR1)
    after = trainer.wait_event(lambda e: e.get("event") == "verify" and e.get("when") == "asked",
                               a.start_timeout, "the trainer's ballast checked again")
    r.update(ballast_ok_after=after["ok"], ballast_tensors_checked=after["tensors"],
             ballast_bad_tensors=after["bad"], ballast_wrong_elements=after["wrong_elements"])


def cuslice_scenario(r, a, crd, logs, label, fast, host_pool, service_gib, serve_quota_gib):
    """One run under cuslice, its figures put in r as they come: `fast` chooses the path;
    service_gib None sizes the service at run time (--must-move-gib). RuntimeError when it
    could not be made; what cuslice failed to do (no memory for the service, a trainer that
    does not come back) is recorded in r for the checks instead."""
    host_pool_bytes = parse_size(host_pool) if host_pool else 0
    wait_s = a.allocation_wait if fast else a.checkpoint_wait
    text = config_text(crd["bytes"], serve_quota_gib, fast, host_pool, wait_s, a.resume_holdoff)
    r.update({"label": label, "fast": fast, "host_pool_bytes_configured": host_pool_bytes,
              "serve_quota_bytes": serve_quota_gib * GiB, "allocation_wait_s": wait_s, "config": text})
    env = worker_env(a.gpu)
    with Scheduler(a.cuslice, text, os.path.join(logs, f"scheduler-{label}.log"), tag=f"preemption-{label}") as sched:
        trainer = Proc(trainer_argv(a), sched.tenant_env(env, "train"), os.path.join(logs, f"trainer-{label}.log"))
        service = None
        try:
            start = trainer.wait_event(lambda e: e.get("event") == "verify", a.start_timeout, "the trainer's ballast")
            ready = trainer.wait_event(lambda e: e.get("event") == "ready", 120, "the trainer's first matmuls")
            r.update(ballast_bytes=ready["ballast_bytes"], ballast_fill_s=ready["fill_seconds"],
                     ballast_ok_at_start=start["ok"], ballast_check_s=start["seconds"])
            if host_pool_bytes:
                r["host_pool_bytes"], r["host_pool_wait_s"] = wait_host_pool(sched, host_pool_bytes, a.pool_timeout)
            t_warm = time.monotonic()
            trainer.wait_event(lambda e: e.get("event") == "rate" and e["t"] >= t_warm + a.warmup_s,
                               a.warmup_s + 60, "the trainer's steady steps")
            r["trainer_bytes"] = process_memory_bytes(trainer.p.pid)
            if service_gib is None:
                service_gib = math.ceil(card_free_bytes(a.gpu) / GiB + a.must_move_gib)
                if service_gib + 1 > serve_quota_gib:
                    raise RuntimeError(f"a service of {service_gib} GiB does not fit serve's quota of "
                                       f"{serve_quota_gib} GiB: lower --must-move-gib")
            r["service_bytes"] = service_gib * GiB
            t_spawn = time.monotonic()
            service = Proc(service_argv(a, service_gib), sched.tenant_env(env, "serve"),
                           os.path.join(logs, f"service-{label}.log"), stdin=True)
            sready = service.wait_event(lambda e: e.get("event") == "ready", 120, "the service's context")
            free_before = card_free_bytes(a.gpu)
            r.update(card_free_before_bytes=free_before, needed_bytes=r["service_bytes"] - free_before,
                     service_sees_free_bytes=sready["free"], service_sees_total_bytes=sready["total"])
            if r["needed_bytes"] <= 0:
                raise RuntimeError(f"the service's {service_gib} GiB fit beside the trainer "
                                   f"({gib(free_before):.1f} GiB free): nothing has to move; raise --service-gib")
            service.send("go")
            try:
                measure_after_go(r, a, sched, trainer, service, fast, wait_s, t_spawn)
            except (RuntimeError, subprocess.SubprocessError) as e:
                r["failure"] = str(e)  # once the service has asked, a process that dies or hangs is cuslice's doing
        finally:
            if service is not None:
                service.stop()
            trainer.stop()
    return r


def native_scenario(a, logs, service_gib):
    """The trainer and the service without cuslice: the service's allocation should fail."""
    env = worker_env(a.gpu)
    trainer = Proc(trainer_argv(a), env, os.path.join(logs, "trainer-native.log"))
    service = None
    r = {"service_bytes": service_gib * GiB}
    try:
        trainer.wait_event(lambda e: e.get("event") == "ready", a.start_timeout, "the native trainer")
        t_warm = time.monotonic()
        trainer.wait_event(lambda e: e.get("event") == "rate" and e["t"] >= t_warm + a.warmup_s, a.warmup_s + 60,
                           "the native trainer's steps")
        t_spawn = time.monotonic()
        service = Proc(service_argv(a, service_gib), env, os.path.join(logs, "service-native.log"), stdin=True)
        service.wait_event(lambda e: e.get("event") == "ready", 120, "the native service's context")
        r["card_free_before_bytes"] = card_free_bytes(a.gpu)
        service.send("go")
        memory = service.wait_event(lambda e: e.get("event") == "memory", 120, "the native service's allocation")
        r.update(service_got_memory=memory["ok"], service_error=memory["error"], allocation_s=memory["seconds"],
                 trainer_rate=rate_between(samples(trainer), t_spawn - a.warmup_s, t_spawn))
    finally:
        if service is not None:
            service.stop()
        trainer.stop()
    return r


def checks(a, fast, ckpt):
    out = []
    le = lambda v, bound: v is not None and v <= bound
    out.append(("fast: no process died or hung once the service asked", "failure" not in fast))
    out.append(("fast: the ballast checks out once filled", fast.get("ballast_ok_at_start") is True))
    out.append((f"fast: the service got its {gib(fast['service_bytes']):.0f} GiB",
                fast.get("service_got_memory") is True))
    out.append(("fast: the suspension took the fast path", fast.get("path") == "fast"))
    out.append((f"fast: time to room at most {a.room_s:g} s", le(fast.get("time_to_room_s"), a.room_s)))
    moved, needed = fast.get("moved_out_bytes"), fast.get("needed_bytes")
    out.append(("fast: the service computes once it has its memory (matmul, convolution, sort)",
                fast.get("service_computed") is True))
    out.append(("fast: moved at most what had to move + 10% + the room margin (1 GiB)",
                moved is not None and needed is not None and moved <= 1.10 * needed + (1 << 30)))
    out.append((f"fast: the trainer steps again within {a.resume_s:g} s of the service's free",
                le(fast.get("resume_s"), a.resume_s)))
    out.append((f"fast: the trainer back to 0.95 of its rate within {a.recovery_s:g} s",
                le(fast.get("recovered_s"), a.recovery_s)))
    out.append(("fast: the trainer is running again", fast.get("state_after") == "running"))
    out.append(("fast: every tensor of the ballast intact after",
                fast.get("ballast_ok_after") is True and fast.get("ballast_tensors_checked") == a.ballast_gib))
    if ckpt is not None:
        out.append(("checkpoint: no process died or hung once the service asked", "failure" not in ckpt))
        out.append(("checkpoint: the ballast checks out once filled", ckpt.get("ballast_ok_at_start") is True))
        out.append(("checkpoint: the service got its memory", ckpt.get("service_got_memory") is True))
        out.append(("checkpoint: the suspension took the checkpoint", ckpt.get("path") == "checkpoint"))
        out.append(("checkpoint: the trainer is running again", ckpt.get("state_after") == "running"))
        out.append(("checkpoint: every tensor of the ballast intact after",
                    ckpt.get("ballast_ok_after") is True and ckpt.get("ballast_tensors_checked") == a.ballast_gib))
    return out


def markdown(crd, a, fast, ckpt, native, results):
    def f(v, d=2):
        return "-" if v is None else f"{v:.{d}f}"

    def g(v):
        return "-" if v is None else f"{v / GiB:.2f} GiB"

    runs = [("cuslice, fast path", fast)] + ([("cuslice, checkpoint", ckpt)] if ckpt is not None else [])
    rows = [
        ("service's allocation", lambda r: g(r.get("service_bytes"))),
        ("card free before it (nvidia-smi)", lambda r: g(r.get("card_free_before_bytes"))),
        ("had to move", lambda r: g(r.get("needed_bytes"))),
        ("path (cuslice status)", lambda r: r.get("path") or "-"),
        ("moved off the card (cuslice status)", lambda r: g(r.get("moved_out_bytes"))),
        ("moved ÷ had to move", lambda r: f(r["moved_out_bytes"] / r["needed_bytes"], 3)
         if r.get("moved_out_bytes") is not None and r.get("needed_bytes") else "-"),
        ("trainer's memory by the driver, before / held", lambda r: f"{g(r.get('trainer_bytes'))} / "
                                                                     f"{g(r.get('trainer_bytes_while_held'))}"),
        ("time to room: the service's torch.empty, s", lambda r: f(r.get("time_to_room_s"), 3)),
        ("moved ÷ suspension time, GiB/s", lambda r: f(r["moved_out_bytes"] / GiB / r["suspend_s"], 1)
         if r.get("moved_out_bytes") and r.get("suspend_s") else "-"),
        ("the service computes next (matmul, conv, sort), s", lambda r: ("ok " + f(r.get("service_compute_s"), 3))
         if r.get("service_computed") else f"FAILED: {r.get('service_compute_error')}"),
        ("suspension by cuslice status, s", lambda r: f(r.get("suspend_s"), 3)),
        ("the service's free → the trainer's first step, s", lambda r: f(r.get("resume_s"), 3)),
        ("resumption by cuslice status, s", lambda r: f(r.get("resume_status_s"), 3)),
        (f"trainer steps/s: before the service / 1–{a.recovery_s:g} s after its first step",
         lambda r: f"{f(r.get('trainer_rate_before'), 1)} / {f(r.get('trainer_rate_after'), 1)}"),
        ("back to 0.95 of its rate after, s", lambda r: f(r.get("recovered_s"), 2)),
        ("ballast intact (tensors checked, bad)", lambda r: f"{r.get('ballast_ok_after')} "
                                                             f"({r.get('ballast_tensors_checked')}, "
                                                             f"{r.get('ballast_bad_tensors')})"),
        ("the trainer's start: its ballast made and filled, s", lambda r: f(r.get("ballast_fill_s"), 2)),
        ("pinned pool ready (cuslice status) / waited, s", lambda r: f"{g(r.get('host_pool_bytes'))} / "
                                                                      f"{f(r.get('host_pool_wait_s'), 1)}"
         if r.get("host_pool_bytes_configured") else "none"),
    ]
    lines = [f"# Memory preemption, fast path, on {crd['name']} (driver {crd['driver']}, "
             f"{crd['bytes'] / GiB:.1f} GiB)", "",
             f"Trainer: {a.ballast_gib} GiB of ballast in 1 GiB tensors, bf16 {a.n}×{a.n} matmuls; service: "
             f"its allocation held {a.service_seconds:g} s; resume_holdoff {a.resume_holdoff}.", "",
             "| | " + " | ".join(name for name, _ in runs) + " |", "|---" * (len(runs) + 1) + "|"]
    lines += [f"| {label} | " + " | ".join(fn(r) for _, r in runs) + " |" for label, fn in rows]
    for name, r in runs:
        if r.get("failure"):
            lines += ["", f"{name}: the run stopped: {r['failure']}"]
        if r.get("service_error") and r.get("service_got_memory") is False:
            lines += ["", f"{name}: the service's allocation failed: `{r['service_error']}`"]
        if r.get("resume_error"):
            lines += ["", f"{name}: the trainer did not come back: {r['resume_error']} (its state: "
                          f"{r.get('state_after')}, {r.get('reason_after')})"]
    if native is not None:
        lines += ["", f"Without cuslice the service's {g(native['service_bytes'])} "
                      + ("**fit** (nothing had to move: the sizes are wrong)" if native.get("service_got_memory")
                         else f"failed after {f(native.get('allocation_s'), 3)} s: `{native.get('service_error')}`")
                      + f"; the trainer ran {f(native.get('trainer_rate'), 1)} steps/s natively."]
    lines += ["", "| check | |", "|---|---|"]
    lines += [f"| {name} | {'pass' if ok else 'FAIL'} |" for name, ok in results]
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cuslice", required=True, help="folder with bin/cuslice-scheduler, bin/cuslice, lib/libcuslice.so")
    p.add_argument("--out", default=os.path.join(HERE, "..", "..", "build-gpu", "out"))
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--gpu", type=int, default=0, help="the GPU, by nvidia-smi's index")
    p.add_argument("--quick", action="store_true", help="smaller sizes for a first run (see above)")
    p.add_argument("--checkpoint", action="store_true", help="also the same with fast: false")
    p.add_argument("--no-native", dest="native", action="store_false", help="skip the run without cuslice")
    p.add_argument("--ballast-gib", type=int)
    p.add_argument("--service-gib", type=int)
    p.add_argument("--must-move-gib", type=float, help="size the service at run time: free memory + this")
    p.add_argument("--service-seconds", type=float)
    p.add_argument("--host-pool", help="the train tenant's host_pool (24GiB), or none")
    p.add_argument("--serve-quota-gib", type=int, help="serve's quota (default: the service + 6 GiB)")
    p.add_argument("--resume-holdoff", default="1s")
    p.add_argument("--allocation-wait", type=int, default=60, help="seconds, fast path")
    p.add_argument("--checkpoint-wait", type=int, default=300, help="seconds, checkpoint")
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--per-step", type=int, default=4)
    p.add_argument("--report-s", type=float, default=0.1)
    p.add_argument("--stall-s", type=float, default=0.5)
    p.add_argument("--warmup-s", type=float, default=3)
    p.add_argument("--room-s", type=float, default=3)
    p.add_argument("--resume-s", type=float, default=3)
    p.add_argument("--recovery-s", type=float, default=5)
    p.add_argument("--start-timeout", type=float, default=300)
    p.add_argument("--pool-timeout", type=float, default=180)
    p.add_argument("--resume-timeout", type=float, default=60, help="seconds (the checkpoint: at least 300)")
    a = p.parse_args(argv)
    quick = {"ballast_gib": 20, "must_move_gib": 8.0, "host_pool": "12GiB", "service_seconds": 5}
    full = {"ballast_gib": 80, "service_gib": 64, "host_pool": "24GiB", "service_seconds": 10}
    for k, v in (quick if a.quick else full).items():
        if k == "service_gib" and not a.quick and a.must_move_gib is not None:
            continue  # sized at run time instead
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.service_gib is not None and a.must_move_gib is not None:
        if a.quick:
            a.must_move_gib = None  # an explicit --service-gib wins over --quick's sizing
        else:
            p.error("--service-gib and --must-move-gib exclude each other")
    if a.host_pool.lower() in ("none", "0", ""):
        a.host_pool = None
    else:
        try:
            parse_size(a.host_pool)
        except ValueError as e:
            p.error(f"--host-pool: {e}")
    if a.ballast_gib < 1:
        p.error("--ballast-gib must be at least 1")
    return a


def main(argv=None):
    a = parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    logs = os.path.join(a.out, "preemption-fast-logs")
    os.makedirs(logs, exist_ok=True)
    fast = ckpt = native = None
    try:
        crd = card(a.gpu)
    except (subprocess.CalledProcessError, FileNotFoundError, IndexError, ValueError) as e:
        print(f"fast preemption benchmark could not run: no GPU {a.gpu} ({e})")
        return 2
    if a.serve_quota_gib is None:
        a.serve_quota_gib = a.service_gib + 6 if a.service_gib is not None else int(crd["bytes"] // GiB) - 4
    failure = None
    fast = {}
    try:
        cuslice_scenario(fast, a, crd, logs, "fast", True, a.host_pool, a.service_gib, a.serve_quota_gib)
        service_gib = fast["service_bytes"] // GiB
        if a.checkpoint:
            ckpt = {}
            cuslice_scenario(ckpt, a, crd, logs, "checkpoint", False, None, service_gib, a.serve_quota_gib)
        if a.native:
            native = native_scenario(a, logs, service_gib)
    except (RuntimeError, OSError, subprocess.SubprocessError, KeyError, ValueError) as e:
        failure = f"{type(e).__name__}: {e}"
    settings = {k: v for k, v in vars(a).items() if k not in ("python",)}
    doc = {"card": crd, "settings": settings, "fast": fast, "checkpoint": ckpt, "native": native}
    if failure is not None:
        doc["could_not_run"] = failure
        with open(os.path.join(a.out, "preemption-fast.json"), "w") as f:
            json.dump(doc, f, indent=2)
        print(f"fast preemption benchmark could not run: {failure}")
        return 2
    results = checks(a, fast, ckpt)
    doc["checks"] = dict(results)
    with open(os.path.join(a.out, "preemption-fast.json"), "w") as f:
        json.dump(doc, f, indent=2)
    md = markdown(crd, a, fast, ckpt, native, results)
    with open(os.path.join(a.out, "preemption-fast.md"), "w") as f:
        f.write(md)
    print(md)
    return 0 if all(ok for _, ok in results) else 1


if __name__ == "__main__":
    sys.exit(main())
