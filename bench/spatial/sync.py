"""The start barrier shared by the spatial benchmark's workers (standard library only).

Every worker of one run gets SPATIAL_SYNC (a folder) and SPATIAL_N (how many workers join).
A worker sets itself up and warms up, writes `ready.<pid>`, and keeps working while it waits;
the first to see N ready files publishes `go` holding t0, a CLOCK_MONOTONIC time (one clock for
every process on Linux) a little in the future, and every worker measures [t0, t0 + SECONDS).
A worker that cannot start writes `abort.<pid>`, and the others stop waiting. Without
SPATIAL_SYNC a worker runs alone (N = 1). This file never touches the GPU.
"""
import json
import os
import sys
import tempfile
import time

BARRIER_TIMEOUT_S = float(os.environ.get("SPATIAL_BARRIER_TIMEOUT_S", "240"))


def now():
    return time.monotonic()


class Barrier:
    def __init__(self):
        self.dir = os.environ.get("SPATIAL_SYNC") or tempfile.mkdtemp(prefix="spatial-sync.")
        self.n = int(os.environ.get("SPATIAL_N", "1"))
        self.t0 = None
        self.deadline = None

    def arrive(self):
        """Marks this worker ready; call wait_step() in the worker's loop afterwards."""
        path = os.path.join(self.dir, f"ready.{os.getpid()}")
        with open(path, "w") as f:
            f.write("ready\n")
        self.deadline = now() + BARRIER_TIMEOUT_S

    def _publish(self):
        # A link is atomic and fails when another worker published first.
        tmp = os.path.join(self.dir, f"go.tmp{os.getpid()}")
        with open(tmp, "w") as f:
            f.write(f"{now() + 0.3:.6f}\n")
        try:
            os.link(tmp, os.path.join(self.dir, "go"))
        except FileExistsError:
            pass
        os.unlink(tmp)

    def poll(self):
        """t0 once every worker is ready, else None; raises past the barrier's timeout."""
        if self.t0 is not None:
            return self.t0
        go = os.path.join(self.dir, "go")
        if not os.path.exists(go):
            names = os.listdir(self.dir)
            aborted = [n for n in names if n.startswith("abort.")]
            if aborted:
                raise RuntimeError(f"another worker could not start ({aborted[0]} in {self.dir})")
            ready = [n for n in names if n.startswith("ready.")]
            if len(ready) < self.n:
                if now() > self.deadline:
                    raise TimeoutError(f"only {len(ready)} of {self.n} workers became ready "
                                       f"within {BARRIER_TIMEOUT_S:.0f} s")
                return None
            self._publish()
        with open(go) as f:
            self.t0 = float(f.read().strip())
        return self.t0


def emit(obj):
    """Prints one JSON line (the run's result) and flushes."""
    print(json.dumps(obj, separators=(",", ":")), flush=True)


def fail(kind, exc, **extra):
    """Reports a worker that could not start, and releases the others waiting for it."""
    sync_dir = os.environ.get("SPATIAL_SYNC")
    if sync_dir and os.path.isdir(sync_dir):
        with open(os.path.join(sync_dir, f"abort.{os.getpid()}"), "w") as f:
            f.write(f"{kind}: {type(exc).__name__}: {exc}\n")
    emit(dict(worker=kind, pid=os.getpid(), error=f"{type(exc).__name__}: {exc}", **extra))
    sys.exit(1)
