"""Pieces shared by the compute benchmark's harness and workers (standard library only).

Start protocol between the harness and a worker, through files in a sync folder:
  1. the worker sets itself up and warms up, then writes `ready.<id>`;
  2. once every worker is ready the harness writes `go`, holding t0, a CLOCK_MONOTONIC time
     (system-wide on Linux, so the same clock in every process) a little in the future;
  3. each worker measures over [t0, t0 + duration) and writes `result.<id>.json`.
Background workers (GEMM loop, trainer, small clients) keep working while they wait for `go`,
so that the measured interval starts in steady-state contention.
"""
import json
import math
import os
import time


def write_atomic(path, text):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_json(path, obj):
    write_atomic(path, json.dumps(obj, separators=(",", ":")))


def read_go(sync_dir):
    """t0 from the go file, or None while there is none."""
    try:
        with open(os.path.join(sync_dir, "go")) as f:
            return float(f.read().strip())
    except (FileNotFoundError, ValueError):
        return None


class GoWatcher:
    """Polls the go file at most every `every` seconds (a stat per poll)."""

    def __init__(self, sync_dir, every=0.02):
        self.sync_dir = sync_dir
        self.every = every
        self.next_check = 0.0
        self.t0 = None

    def poll(self, now):
        if self.t0 is None and now >= self.next_check:
            self.next_check = now + self.every
            self.t0 = read_go(self.sync_dir)
        return self.t0


def window_counts(stamps, t0, duration, window):
    """Number of stamps in each whole window [t0 + k*window, t0 + (k+1)*window) within duration."""
    n = max(1, int(duration / window + 1e-9))  # whole windows only
    counts = [0] * n
    for s in stamps:
        k = math.floor((s - t0) / window)
        if 0 <= k < n:
            counts[k] += 1
    return counts


def percentile(values, q):
    """q in [0, 100], linear interpolation between closest ranks; None for no values."""
    if not values:
        return None
    v = sorted(values)
    if len(v) == 1:
        return v[0]
    pos = (len(v) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def median(values):
    return percentile(values, 50)


def sleep_until(deadline, spin=0.0008):
    """Sleeps, then spins for the last `spin` seconds, so the wake-up is accurate to a few us."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        if left > spin:
            time.sleep(left - spin)
