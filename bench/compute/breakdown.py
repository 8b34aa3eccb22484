#!/usr/bin/env python3
"""Where the service's slow requests spend their time, from a compute.json that
bench/run_compute.sh wrote: for each scenario with a service and each mode, the requests at
or above the 99th latency percentile (and, for comparison, the median ones), split into

  enqueue   host time to enqueue the request (a wait for the token shows here)
  gpu span  from the request's first operation starting on the GPU to its last completing
            (kernels of another context running between them show here)
  before    the rest: waiting for the GPU to start the request (another context's work in
            flight, its queue) and the host noticing completion

    python3 bench/compute/breakdown.py build-gpu/out/compute.json
"""
import json
import sys
from statistics import mean, median


def split(w):
    lat, enq, span = w.get("latency_ms"), w.get("enqueue_ms"), w.get("gpu_span_ms")
    if not lat or not enq or not span or len(enq) != len(lat):
        return None
    return [(l, e, s, l - e - s) for l, e, s in zip(lat, enq, span)]


def row(parts):
    return "{:7.2f} {:8.2f} {:9.2f} {:8.2f}".format(*(mean(p[i] for p in parts) for i in range(4)))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        raw = json.load(f)
    print(f"{'scenario':<12} {'mode':<12} {'rep':>3} {'which':<8} {'n':>4} {'latency':>7} {'enqueue':>8} "
          f"{'gpu span':>9} {'before':>8}   (ms, means)")
    for r in raw["records"]:
        if not r.get("ok"):
            continue
        for wid, w in r["workers"].items():
            parts = split(w)
            if parts is None:
                continue
            by_lat = sorted(parts)
            p99 = by_lat[min(len(by_lat) - 1, int(0.99 * len(by_lat)))][0]
            p50 = median(p[0] for p in parts)
            tail = [p for p in parts if p[0] >= p99]
            mid = [p for p in parts if abs(p[0] - p50) <= 0.05 * p50] or [by_lat[len(by_lat) // 2]]
            for which, sel in (("p99+", tail), ("p50", mid)):
                print(f"{r['trial'] + '/' + wid:<12} {r['mode']:<12} {r['rep']:>3} {which:<8} {len(sel):>4} {row(sel)}")


if __name__ == "__main__":
    main()
