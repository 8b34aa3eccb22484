"""How close to "alone" any scheduler that preempts only between kernels can keep the
service's tail beside the benchmark trainer: the lower bound behind the priority target.

    python3 bench/compute/preemption_bound.py KERNELS.json COMPUTE.json [--busy F]

KERNELS.json: trainer_kernels.py --dump (every kernel's duration in a few training steps).
COMPUTE.json: a bench/run_compute.sh result holding the trial svc_alone (the service's
latencies alone). A request that arrives while a trainer kernel runs waits at least for the
rest of that kernel, whatever the scheduler does between kernels (it could also wait for queued
work; this bound assumes none). Arrival times are uniform over the trainer's timeline, and a
kernel is running at arrival with probability --busy (default 1: the trainer keeps the GPU
busy whenever the service is idle). A request's latency is then its latency alone plus that
wait, drawn independently. Prints the p50/p99 of that latency and its ratio to p99 alone.
"""
import argparse
import bisect
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import percentile  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("kernels")
    p.add_argument("compute")
    p.add_argument("--busy", type=float, default=1.0)
    p.add_argument("--samples", type=int, default=200_000)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    durs = [d / 1000.0 for d in json.load(open(a.kernels))["durations_us"] if d > 0]  # ms
    alone = None
    for r in json.load(open(a.compute))["records"]:
        if r["trial"] == "svc_alone" and r.get("workers", {}).get("svc", {}).get("latency_ms"):
            alone = (alone or []) + r["workers"]["svc"]["latency_ms"]
    if not alone:
        raise SystemExit(f"{a.compute} has no svc_alone latencies")
    # Arrival uniform over the kernels laid end to end: the kernel hit is chosen in proportion
    # to its duration, the point within it uniformly; the wait is what is left of it.
    ends, t = [], 0.0
    for d in durs:
        t += d
        ends.append(t)
    rng = random.Random(a.seed)
    lat, waits = [], []
    for _ in range(a.samples):
        wait = 0.0
        if rng.random() < a.busy:
            at = rng.random() * t
            i = bisect.bisect_right(ends, at)
            wait = ends[min(i, len(ends) - 1)] - at
        waits.append(wait)
        lat.append(rng.choice(alone) + wait)
    p99_alone = percentile(alone, 99)
    print(f"kernels {len(durs)}, {t:.1f} GPU ms; busy at arrival {a.busy:.2f}")
    print(f"wait for the kernel in flight: p50 {percentile(waits, 50):.3f} ms, p99 {percentile(waits, 99):.3f} ms, "
          f"max {max(waits):.3f} ms")
    print(f"service alone: p50 {percentile(alone, 50):.3f} ms, p99 {p99_alone:.3f} ms ({len(alone)} requests)")
    print(f"bound beside the trainer: p50 {percentile(lat, 50):.3f} ms, p99 {percentile(lat, 99):.3f} ms "
          f"= {percentile(lat, 99) / p99_alone:.2f} x p99 alone")


if __name__ == "__main__":
    main()
