"""What being preemptible costs a process that is never suspended: bench/preemption/idle_cost.sh
runs the parts, this sums them up from the folder they wrote.

    python3 bench/preemption/idle_cost.py DIR [--out-prefix PATH] [--launch-tolerance 0.01]
        [--alloc-tolerance 1.10]

DIR holds what each part left (a part that did not run is left out of the table):
  launch/bench.log      bench/run.sh --preemptible --in-process: per process, the ratio of a launch
                        through the hook to the driver's own, in configurations scheduled (a
                        tenant that is not preemptible) and preemptible (a preemptible tenant);
  alloc/bench.log       bench/run.sh --preemptible: launch_alloc's calls per process, the two
                        configurations in the same rounds;
  frameworks/CONFIG-rN/gpu_suite.log   tests/gpu/suite.py's framework scenarios with the hook
                        alone (hooked), in the tenant that is not preemptible (scheduled) and in
                        the preemptible one (preemptible), round N; a scenario logged twice in
                        one file counts with its latest result.

Checks: in one process, a launch's ratio in the preemptible tenant at most --launch-tolerance
above the other tenant's (medians over processes); across processes, each call's time in the
preemptible tenant over the other's in the same round, median over rounds, at most
--alloc-tolerance; every framework scenario that passes in the tenant that is not preemptible
also passes in the preemptible one. Writes PREFIX.md and PREFIX.json (PREFIX default
DIR/../idle-cost). Exit status 0 when every check passed, 1 when one failed, 2 when DIR holds
no result."""
import argparse
import glob
import json
import os
import re
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from summarize import median_interval  # noqa: E402  bench/summarize.py, beside this folder

BASE, OURS = "scheduled", "preemptible"


def read_bench_log(path):
    """{(round, binary, config): {measurement: median ns}} and {(binary, measurement, config):
    [in-process ratios]} from bench/run.sh's log."""
    medians, ratios = defaultdict(dict), defaultdict(list)
    cur = None
    for line in open(path):
        f = line.split()
        if not f:
            continue
        if f[0] == "RUN" and len(f) == 4:
            cur = (f[1], f[2], f[3])
        elif f[0] == "BENCH" and cur and len(f) >= 3:
            medians[cur][f[1]] = float(f[2])
        elif f[0] == "RATIO" and cur and len(f) >= 3:
            ratios[(cur[1], f[1], cur[2])].append(float(f[2]))
    return medians, ratios


def summary(values):
    if not values:
        return None
    interval = median_interval(values)
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values),
            "interval95": list(interval) if interval else None}


def launch_part(path, tolerance):
    _, ratios = read_bench_log(path)
    rows, checks = [], []
    for b, n in sorted({(b, n) for (b, n, _) in ratios}):
        per = {c: summary(ratios.get((b, n, c), [])) for c in ("native", "hooked", BASE, OURS)}
        rows.append({"binary": b, "measurement": n, **per})
        if per[BASE] and per[OURS]:
            diff = per[OURS]["median"] - per[BASE]["median"]
            checks.append((f"in one process, {n}: preemptible at most {tolerance:g} above the other tenant "
                           f"({per[OURS]['median']:.3f} against {per[BASE]['median']:.3f})", diff <= tolerance))
    return rows, checks


def alloc_part(path, tolerance):
    medians, _ = read_bench_log(path)
    pairs = defaultdict(list)  # (binary, measurement) -> per-round preemptible / scheduled
    for (r, b, c), values in medians.items():
        if c != OURS or (r, b, BASE) not in medians:
            continue
        base = medians[(r, b, BASE)]
        for n, v in values.items():
            if base.get(n):
                pairs[(b, n)].append(v / base[n])
    rows, checks = [], []
    for (b, n), values in sorted(pairs.items()):
        s = summary(values)
        rows.append({"binary": b, "measurement": n, "preemptible_over_scheduled": s})
        checks.append((f"across processes, {b} {n}: preemptible ÷ the other tenant at most {tolerance:g} "
                       f"({s['median']:.3f})", s["median"] <= tolerance))
    return rows, checks


def read_suite_log(path):
    """{scenario: {"pass": bool, "seconds": float|None}} from suite.py's gpu_suite.log."""
    out, name, secs = {}, None, None
    for line in open(path):
        if line.startswith("======== "):
            name, secs = line[len("======== "):].strip(), None
        elif name and (m := re.match(r"^rc -?\d+, ([0-9.]+)s$", line.strip())):
            secs = float(m.group(1))
        elif line.startswith("RESULT ") and name:
            try:
                r = json.loads(line[len("RESULT "):])
            except json.JSONDecodeError:
                continue
            out[name] = {"pass": bool(r.get("pass")), "seconds": secs,
                         "failed": [k for k, v in r.get("checks", {}).items() if not v]}
    return out


def frameworks_part(folder):
    runs = defaultdict(dict)  # config -> scenario -> [results over rounds]
    for log in sorted(glob.glob(os.path.join(folder, "*-r*", "gpu_suite.log"))):
        config = os.path.basename(os.path.dirname(log)).rsplit("-r", 1)[0]
        for scenario, r in read_suite_log(log).items():
            runs[config].setdefault(scenario, []).append(r)
    scenarios = list(dict.fromkeys(s for c in runs.values() for s in c))  # the suite's order
    rows, checks = [], []
    for s in scenarios:
        row = {"scenario": s}
        for c in ("hooked", BASE, OURS):
            rs = runs.get(c, {}).get(s, [])
            row[c] = {"passed": sum(r["pass"] for r in rs), "runs": len(rs),
                      "seconds": statistics.median([r["seconds"] for r in rs if r["seconds"] is not None])
                      if any(r["seconds"] is not None for r in rs) else None,
                      "failed": sorted({k for r in rs for k in r["failed"]})}
        rows.append(row)
        if row[BASE]["runs"] and row[BASE]["passed"] == row[BASE]["runs"]:
            checks.append((f"{s}: passes in the preemptible tenant as in the other",
                           row[OURS]["runs"] > 0 and row[OURS]["passed"] == row[OURS]["runs"]))
    if rows and not checks:
        checks.append(("some framework scenario passes in the tenant that is not preemptible", False))
    return rows, checks


def markdown(launch, alloc, frameworks, checks):
    def s(x):
        if not x:
            return "-"
        ci = f", 95% {x['interval95'][0]:.3f}–{x['interval95'][1]:.3f}" if x.get("interval95") else ""
        return f"{x['median']:.3f} ({x['min']:.3f}–{x['max']:.3f}{ci}; {x['n']})"

    lines = ["# What being preemptible costs when nothing is suspended", ""]
    if launch is not None:
        lines += ["A launch through the hook ÷ the driver's own, in one process (median over processes, "
                  "min–max, 95% interval; processes):", "",
                  "| measurement | native (the method's error) | hook alone | tenant, not preemptible | "
                  "preemptible tenant |", "|---|---|---|---|---|"]
        lines += [f"| {r['measurement']} | {s(r['native'])} | {s(r['hooked'])} | {s(r[BASE])} | {s(r[OURS])} |"
                  for r in launch]
        lines.append("")
    if alloc is not None:
        lines += ["Each call in the preemptible tenant ÷ the same call in the tenant that is not, paired by "
                  "round (median over rounds, min–max, 95% interval; rounds):", "",
                  "| binary | measurement | preemptible ÷ not |", "|---|---|---|"]
        lines += [f"| {r['binary']} | {r['measurement']} | {s(r['preemptible_over_scheduled'])} |" for r in alloc]
        lines.append("")
    if frameworks is not None:
        def cell(x):
            if not x["runs"]:
                return "-"
            secs = f", {x['seconds']:.1f} s" if x["seconds"] is not None else ""
            why = f" ({'; '.join(x['failed'])})" if x["failed"] else ""
            return f"{x['passed']}/{x['runs']}{secs}{why}"
        lines += ["Framework scenarios (tests/gpu/suite.py, CUSLICE_MEMORY_LIMIT=4GiB): passed/runs, median "
                  "time:", "", "| scenario | hook alone | tenant, not preemptible | preemptible tenant |",
                  "|---|---|---|---|"]
        lines += [f"| {r['scenario']} | {cell(r['hooked'])} | {cell(r[BASE])} | {cell(r[OURS])} |"
                  for r in frameworks]
        lines.append("")
    lines += ["| check | |", "|---|---|"]
    lines += [f"| {name} | {'pass' if ok else 'FAIL'} |" for name, ok in checks]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir")
    p.add_argument("--out-prefix")
    p.add_argument("--launch-tolerance", type=float, default=0.01)
    p.add_argument("--alloc-tolerance", type=float, default=1.10)
    a = p.parse_args(argv)
    prefix = a.out_prefix or os.path.join(a.dir, "..", "idle-cost")
    launch = alloc = frameworks = None
    checks = []
    if os.path.exists(os.path.join(a.dir, "launch", "bench.log")):
        launch, c = launch_part(os.path.join(a.dir, "launch", "bench.log"), a.launch_tolerance)
        checks += c
    if os.path.exists(os.path.join(a.dir, "alloc", "bench.log")):
        alloc, c = alloc_part(os.path.join(a.dir, "alloc", "bench.log"), a.alloc_tolerance)
        checks += c
    if glob.glob(os.path.join(a.dir, "frameworks", "*-r*", "gpu_suite.log")):
        frameworks, c = frameworks_part(os.path.join(a.dir, "frameworks"))
        checks += c
    if not checks:
        print(f"no result under {a.dir}: run bench/preemption/idle_cost.sh first")
        return 2
    md = markdown(launch, alloc, frameworks, checks)
    with open(prefix + ".md", "w") as f:
        f.write(md)
    with open(prefix + ".json", "w") as f:
        json.dump({"launch_in_process": launch, "calls_across_processes": alloc, "frameworks": frameworks,
                   "checks": dict(checks)}, f, indent=2)
    print(md)
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
