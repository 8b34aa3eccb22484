"""Summarises bench/run.sh's runs: per (binary, measurement), hooked against native.

    python3 summarize.py RUNS_FILE MARKDOWN_OUT

RUNS_FILE holds lines `RUN <round> <binary> <config>` (config: native, hooked, or with
--cuslice also scheduled and below) followed by that run's `BENCH <name> <median> <min>
<max> ns/op` lines. For each measurement and configuration other than native the table gives
the median over rounds of the per-run medians, the min–max of those per-run medians,
config/native as the ratio of the two medians, and the paired ratio: config/native within each
round (the runs next to each other), median and min–max over rounds, which the host's drift
from round to round does not move, and from 8 rounds on a 95% interval of that median (the
2.5th and 97.5th percentiles of the medians of 2,000 resamples of the rounds, with a fixed
seed, so the same runs always give the same interval).

A run may also print `RATIO <name> <value>` lines: a ratio measured inside the process
(bench/launch_in_process.cu: a launch through the hook over the same launch straight to the
driver). A second table gives, per configuration, their median over runs, min–max and the
same 95% interval; native runs are the method's own error.
"""
import random
import statistics
import sys
from collections import defaultdict


def median_interval(values, resamples=2000):
    """A 95% bootstrap interval of the median of `values` (None below 8 values)."""
    if len(values) < 8:
        return None
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def main(runs_file, md_out):
    per = defaultdict(list)  # (binary, name, config) -> per-run medians
    ratios = defaultdict(list)  # (binary, name, config) -> per-run in-process ratios
    by_round = {}  # (round, binary, name, config) -> the run's median
    cur = None
    for line in open(runs_file):
        f = line.split()
        if not f:
            continue
        if f[0] == "RUN":
            cur = (f[1], f[2], f[3])
        elif f[0] == "BENCH" and cur:
            per[(cur[1], f[1], cur[2])].append(float(f[2]))
            by_round[(cur[0], cur[1], f[1], cur[2])] = float(f[2])
        elif f[0] == "RATIO" and cur:
            ratios[(cur[1], f[1], cur[2])].append(float(f[2]))
    keys = sorted({(b, n) for (b, n, _) in per}, key=lambda k: (k[0], k[1]))
    order = ["hooked", "scheduled", "below"]
    configs = sorted({c for (_, _, c) in per if c != "native"}, key=lambda c: (order.index(c) if c in order else 9, c))
    rows = ["| binary | measurement | config | native median (min–max) | config median (min–max) | config/native | "
            "paired ratio (min–max) | its 95% interval | runs |",
            "|---|---|---|---|---|---|---|---|---|"]

    def fmt(v):
        return f"{v / 1000:.2f} µs" if v >= 1000 else f"{v:.0f} ns"

    for b, n in keys:
        nat = per.get((b, n, "native"), [])
        for c in configs:
            hk = per.get((b, n, c), [])
            if not nat or not hk:
                continue
            mn, mh = statistics.median(nat), statistics.median(hk)
            rounds = sorted({r for (r, b2, n2, c2) in by_round if (b2, n2, c2) == (b, n, "native")})
            paired = [by_round[(r, b, n, c)] / by_round[(r, b, n, "native")]
                      for r in rounds if (r, b, n, c) in by_round]
            pr = (f"{statistics.median(paired):.3f} ({min(paired):.3f}–{max(paired):.3f})" if paired else "—")
            interval = median_interval(paired)
            ci = f"{interval[0]:.3f}–{interval[1]:.3f}" if interval else "—"
            rows.append(f"| {b} | {n} | {c} | {fmt(mn)} ({fmt(min(nat))}–{fmt(max(nat))}) | "
                        f"{fmt(mh)} ({fmt(min(hk))}–{fmt(max(hk))}) | {mh / mn:.2f} | {pr} | {ci} | "
                        f"{len(nat)}+{len(hk)} |")
    if ratios:
        order_all = ["native"] + order
        rows += ["", "| binary | ratio, inside each run | config | median (min–max) | its 95% interval | runs |",
                 "|---|---|---|---|---|---|"]
        for (b, n, c) in sorted(ratios, key=lambda k: (k[0], k[1], order_all.index(k[2]) if k[2] in order_all else 9)):
            v = ratios[(b, n, c)]
            interval = median_interval(v)
            ci = f"{interval[0]:.3f}–{interval[1]:.3f}" if interval else "—"
            rows.append(f"| {b} | {n} | {c} | {statistics.median(v):.3f} ({min(v):.3f}–{max(v):.3f}) | {ci} | {len(v)} |")
    md = "\n".join(rows)
    with open(md_out, "w") as f:
        f.write(md + "\n")
    print(md)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
