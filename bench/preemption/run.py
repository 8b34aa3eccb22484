"""Memory preemption on a real GPU: how fast a high-priority service gets the memory a
preemptible trainer holds, whether the trainer comes back intact, and how fast cuslice's
suspensions and resumptions move memory against the driver's checkpoint API called directly.

    python3 bench/preemption/run.py --cuslice DIR --raw BIN [--out DIR] [--holder-gib 40]
        [--ballast-gib 30] [--service-gib 50] [--service-seconds 15]

1. Baseline: a native process holding --holder-gib GiB of known content and checking it in a
   loop; `raw_checkpoint` locks, checkpoints, restores and unlocks it. Memory (nvidia-smi) and
   times give the raw GB/s; the process must go on with its content intact.
2. cuslice: cuslice-scheduler (DIR/bin, the hook DIR/lib) with a preemptible low-priority tenant `train`
   and a high-priority tenant `serve`. A ResNet-50 trainer with a --ballast-gib ballast of
   known content runs in `train`; then a service in `serve` allocates --service-gib GiB at
   once, which the card cannot hold beside the trainer. Measured: the service's wait for its
   memory against the suspension's own time (the target: at most 0.5 s more), the trainer's
   steps and loss before the suspension and after its resumption (its step count and loss go
   on where they were, its ballast intact), cuslice's GB/s both ways from `cuslice status`.

Writes OUT/preemption.json (everything measured) and OUT/preemption.md (the table), and every
process's output under OUT/preemption-logs/. Exit status 0 when every check passed, 1 when one
failed, 2 when the run could not be made (no GPU, no checkpoint API, a process died)."""
import argparse
import json
import math
import os
import subprocess
import sys
import time

from harness import GB, GiB, Proc, Scheduler, process_memory_bytes, smi, tenant_status

HERE = os.path.dirname(os.path.abspath(__file__))


def baseline(a, logs, env):
    holder = Proc([a.python, os.path.join(HERE, "workers.py"), "holder", "--gib", str(a.holder_gib)], env,
                  os.path.join(logs, "holder.log"))
    try:
        holder.wait_event(lambda e: e.get("event") == "ready", 180, "the holder to fill its memory")
        holder.wait_event(lambda e: e.get("event") == "alive", 30, "the holder to check its memory")
        held = process_memory_bytes(holder.p.pid)
        raw = subprocess.run([a.raw, str(holder.p.pid), "--hold-s", "2"], capture_output=True, text=True)
        result = json.loads(raw.stdout.strip().splitlines()[-1]) if raw.stdout.strip() else {"error": raw.stderr}
        if "error" in result:
            return {"error": result["error"], "bytes": held}
        after = time.monotonic()
        alive = holder.wait_event(lambda e: e.get("event") == "alive" and e["t"] > after + 1, 120,
                                  "the holder to go on after its restore")
        return {
            "bytes": held,
            "lock_s": result["lock_s"], "checkpoint_s": result["checkpoint_s"],
            "restore_s": result["restore_s"], "unlock_s": result["unlock_s"],
            "checkpoint_gbps": held / GB / result["checkpoint_s"],
            "restore_gbps": held / GB / result["restore_s"],
            "goes_on_intact": bool(alive["pattern_ok"]),
        }
    finally:
        holder.stop()


def status(sched):
    tenant, moved = tenant_status(sched.status(), "train")
    return tenant["suspension"], moved


def cuslice_run(a, logs, env, card_bytes):
    config = f"""scheduler:
  gpu_memory: {card_bytes}
  preemption:
    allocation_wait: {a.allocation_wait}s
    resume_holdoff: 1s
tenants:
  - name: serve
    priority: high
    memory: {a.service_gib + 4}GiB
    allow_env: true
  - name: train
    priority: low
    memory: 100%
    preemptible: true
    allow_env: true
"""
    procs = []
    with Scheduler(a.cuslice, config, os.path.join(logs, "scheduler.log")) as sched:
        try:
            trainer = Proc([a.python, os.path.join(HERE, "workers.py"), "trainer", "--ballast-gib", str(a.ballast_gib),
                            "--batch", str(a.batch)], sched.tenant_env(env, "train"),
                           os.path.join(logs, "trainer.log"))
            procs.append(trainer)
            trainer.wait_event(lambda e: e.get("event") == "step" and e["step"] >= a.warmup_steps, 300,
                               "the trainer's first steps")
            trainer_bytes = process_memory_bytes(trainer.p.pid)
            service = Proc([a.python, os.path.join(HERE, "workers.py"), "service", "--gib", str(a.service_gib),
                            "--seconds", str(a.service_seconds)], sched.tenant_env(env, "serve"),
                           os.path.join(logs, "service.log"))
            procs.append(service)
            memory = service.wait_event(lambda e: e.get("event") in ("memory", "error"), a.allocation_wait + 120,
                                        "the service's memory")
            if memory.get("event") == "error":
                memory = service.wait_event(lambda e: e.get("event") == "memory", 30, "the service's memory")
            trainer.poll_events(0)
            suspended, moved_out = status(sched)
            done = service.wait_event(lambda e: e.get("event") == "done", a.service_seconds + 120,
                                      "the service's requests")
            service.stop()
            # The trainer comes back: enough steps after it to see its ballast checked again.
            after_service = done["t"]
            resumed_step = trainer.wait_event(lambda e: e.get("event") == "step" and e["t"] > after_service, 300,
                                              "the trainer to step again")
            trainer.wait_event(lambda e: e.get("event") == "step"
                               and e["step"] >= resumed_step["step"] + 2 * a.check_every,
                               300, "the trainer's ballast to be checked after its resumption")
            resumed, moved_both = status(sched)
            steps = [e for e in trainer.events if e.get("event") == "step"]
            before = [e for e in steps if e["t"] < memory["asked"]]
            after = [e for e in steps if e["t"] > after_service]
            gap_steps = [e for e in steps if memory["asked"] <= e["t"] <= after_service]
            checks_after = [e["ballast_ok"] for e in after if e["ballast_ok"] is not None]
            last_before, first_after = before[-1], after[0]
            suspend_s = suspended["suspend_seconds"]
            resume_s = resumed["resume_seconds"]
            moved_back = moved_both - moved_out
            return {
                "trainer_bytes": trainer_bytes,
                "service_wait_s": memory["seconds"],
                "service_got_memory": memory["ok"],
                "suspend_s": suspend_s,
                "service_overhead_s": memory["seconds"] - suspend_s,
                "moved_out_bytes": moved_out,
                "moved_back_bytes": moved_back,
                "suspend_gbps": moved_out / GB / suspend_s if suspend_s > 0 else None,
                "resume_s": resume_s,
                "resume_gbps": moved_back / GB / resume_s if resume_s > 0 else None,
                "suspended_seconds": resumed["suspended_seconds"],
                "suspensions": resumed["suspensions"],
                "service_requests": done["requests"],
                "service_p50_ms": done["p50_ms"], "service_p99_ms": done["p99_ms"],
                "trainer_last_step_before": last_before["step"], "trainer_loss_before": last_before["loss"],
                "trainer_first_step_after": first_after["step"], "trainer_loss_after": first_after["loss"],
                "trainer_steps_while_suspended": len(gap_steps),
                "ballast_intact": bool(checks_after) and all(checks_after),
                "state_after": resumed["state"],
            }
        finally:
            for p in procs:
                p.stop()


def checks(base, run):
    out = []
    out.append(("raw API: the process goes on, its memory intact", base.get("goes_on_intact") is True))
    out.append(("the service got its memory", run["service_got_memory"]))
    out.append(("the service waited at most the suspension + 0.5 s", run["service_overhead_s"] <= 0.5))
    out.append(("the trainer was resumed", run["state_after"] == "running"))
    out.append(("the trainer's steps go on where they were",
                run["trainer_first_step_after"] >= run["trainer_last_step_before"] + 1))
    before, after = run["trainer_loss_before"], run["trainer_loss_after"]
    out.append(("the trainer's loss goes on where it was (not back to the start, not NaN)",
                math.isfinite(after) and abs(after - before) <= max(0.5, 0.25 * abs(before))))
    out.append(("the trainer's ballast is intact after its resumption", run["ballast_intact"]))
    return out


def markdown(card, base, run, results):
    f = lambda v, d=2: "-" if v is None else f"{v:.{d}f}"
    lines = [f"# Memory preemption on {card['name']} (driver {card['driver']})", "",
             "| | bytes | lock s | checkpoint s | restore s | out GB/s | back GB/s |", "|---|---|---|---|---|---|---|"]
    if "error" not in base:
        lines.append(f"| raw API (native holder) | {base['bytes'] / GiB:.1f} GiB | {f(base['lock_s'], 3)} | "
                     f"{f(base['checkpoint_s'])} | {f(base['restore_s'])} | {f(base['checkpoint_gbps'])} | "
                     f"{f(base['restore_gbps'])} |")
    else:
        lines.append(f"| raw API | failed: {base['error']} | | | | | |")
    lines.append(f"| cuslice (ResNet-50 trainer + ballast) | {run['moved_out_bytes'] / GiB:.1f} GiB | | "
                 f"{f(run['suspend_s'])} | {f(run['resume_s'])} | {f(run['suspend_gbps'])} | {f(run['resume_gbps'])} |")
    lines += ["",
              f"- The service asked for its memory and got it after {f(run['service_wait_s'])} s; the suspension "
              f"itself took {f(run['suspend_s'])} s: {f(run['service_overhead_s'], 3)} s more.",
              f"- The trainer was suspended {f(run['suspended_seconds'], 1)} s; step {run['trainer_last_step_before']} "
              f"(loss {f(run['trainer_loss_before'], 4)}) before, step {run['trainer_first_step_after']} "
              f"(loss {f(run['trainer_loss_after'], 4)}) after; {run['trainer_steps_while_suspended']} steps logged "
              "between the service's request and its end (before the lock and after the resumption).",
              f"- The service served {run['service_requests']} requests, p50 {f(run['service_p50_ms'])} ms, "
              f"p99 {f(run['service_p99_ms'])} ms.", "", "| check | |", "|---|---|"]
    lines += [f"| {name} | {'pass' if ok else 'FAIL'} |" for name, ok in results]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cuslice", required=True, help="folder with bin/cuslice-scheduler, bin/cuslice, lib/libcuslice.so")
    p.add_argument("--raw", required=True, help="the raw_checkpoint program")
    p.add_argument("--out", default=os.path.join(HERE, "..", "..", "build-gpu", "out"))
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--holder-gib", type=int, default=40)
    p.add_argument("--ballast-gib", type=int, default=30)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--warmup-steps", type=int, default=30)
    p.add_argument("--check-every", type=int, default=20)
    p.add_argument("--service-gib", type=int, default=50)
    p.add_argument("--service-seconds", type=float, default=15)
    p.add_argument("--allocation-wait", type=int, default=180)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    logs = os.path.join(a.out, "preemption-logs")
    os.makedirs(logs, exist_ok=True)
    name, total_mib, driver = [x.strip() for x in smi("--query-gpu=name,memory.total,driver_version",
                                                      "--format=csv,noheader,nounits").splitlines()[0].split(",")]
    card = {"name": name, "driver": driver, "bytes": int(total_mib) * (1 << 20)}
    env = dict(os.environ)
    try:
        base = baseline(a, logs, env)
        run = cuslice_run(a, logs, env, card["bytes"])
    except RuntimeError as e:
        print(f"preemption benchmark could not run: {e}")
        return 2
    results = checks(base, run)
    with open(os.path.join(a.out, "preemption.json"), "w") as f:
        json.dump({"card": card, "baseline": base, "cuslice": run, "checks": dict(results)}, f, indent=2)
    md = markdown(card, base, run, results)
    with open(os.path.join(a.out, "preemption.md"), "w") as f:
        f.write(md)
    print(md)
    return 0 if all(ok for _, ok in results) else 1


if __name__ == "__main__":
    sys.exit(main())
