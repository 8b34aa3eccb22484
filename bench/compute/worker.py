#!/usr/bin/env python3
"""One tenant process of the compute benchmark. Started by harness.py, natively or under
LD_PRELOAD=libcuslice.so; knows nothing of cuslice.

Kinds:
  gemm     loops C = A @ B (bf16, --size square, torch.matmul) with at most --depth GEMMs in
           flight; reports GEMMs completed per window (GPU completion times from CUDA events)
  trainer  ResNet-50 training (torchvision, weights=None), batch --batch, AMP (fp16 autocast +
           GradScaler), SGD, random data; reports steps (and images) per window
  small    a small loop: 4 fp16 GEMMs of --size (default 2048) per iteration, --depth 2
  service  ResNet-50 inference, batch --batch fp16, CUDA-graph replay; one request every
           --interval s from t0 (open loop: latency counts from the scheduled arrival, so a
           backlog shows); per request: copy the input in, replay, copy the logits out, wait
  probe    the same schedule, each request one tiny kernel (x.add_(1)): its latency is the
           time a waiting tenant needs to get a kernel onto the GPU
--fake replaces the GPU work by sleeps (no torch), to test the harness without a GPU.
"""
import argparse
import collections
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import GoWatcher, read_go, sleep_until, window_counts, write_atomic, write_json  # noqa: E402


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=["gemm", "trainer", "small", "service", "probe"])
    p.add_argument("--id", required=True)
    p.add_argument("--sync", required=True)
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--window", type=float, default=1.0)
    p.add_argument("--size", type=int, default=0)
    p.add_argument("--depth", type=int, default=0)
    p.add_argument("--batch", type=int, default=0)
    p.add_argument("--interval", type=float, default=0.010)
    p.add_argument("--poll", choices=["spin", "sleep", "sync"], default="")
    p.add_argument("--side", type=int, default=0,
                   help="gemm: after each GEMM, this many small kernels on a second stream")
    p.add_argument("--max-wait", type=float, default=300.0, help="give up if no go by then")
    p.add_argument("--fake", action="store_true")
    return p.parse_args()


class Ctx:
    def __init__(self, a):
        self.a = a
        self.start = time.monotonic()
        self.result = {"id": a.id, "kind": a.kind, "pid": os.getpid(), "ok": False,
                       "duration": a.duration, "window": a.window}

    def ready(self, **warm):
        self.result["warm"] = warm
        self.result["ready_after_s"] = round(time.monotonic() - self.start, 3)
        write_atomic(os.path.join(self.a.sync, f"ready.{self.a.id}"), "1")

    def check_wait(self, now):
        if now - self.start > self.a.max_wait:
            raise RuntimeError("no go signal within --max-wait")

    def finish(self):
        self.result["ok"] = True
        write_json(os.path.join(self.a.sync, f"result.{self.a.id}.json"), self.result)


# ---------------------------------------------------------------------------------------------
# Background kinds: a loop of units of work, at most `depth` in flight, each unit's GPU
# completion time taken from a timing event relative to a reference event whose host time is
# known. Host blocking (a gated launch waiting for the token) therefore does not move stamps.

def background(ctx, torch, work, depth, poll, items_per_unit, warm_units, warm_info=None):
    a = ctx.a
    for _ in range(warm_units):
        work()
    torch.cuda.synchronize()
    ring = [torch.cuda.Event(enable_timing=True) for _ in range(depth + 1)]
    ref = torch.cuda.Event(enable_timing=True)
    ref.record()
    ref.synchronize()
    host_ref = time.monotonic()

    def wait(ev):
        if poll == "spin":
            while not ev.query():
                pass
        elif poll == "sleep":
            while not ev.query():
                time.sleep(0.0002)
        else:
            ev.synchronize()

    def stamp(ev):
        return host_ref + ref.elapsed_time(ev) / 1000.0

    pending = collections.deque()
    stamps = []
    watcher = GoWatcher(a.sync)
    ctx.ready(**(warm_info or {}))
    i = 0
    while True:
        work()
        ev = ring[i % len(ring)]
        i += 1
        ev.record()
        pending.append(ev)
        while pending and pending[0].query():
            stamps.append(stamp(pending.popleft()))
        while len(pending) >= depth:
            wait(pending[0])
            stamps.append(stamp(pending.popleft()))
        now = time.monotonic()
        t0 = watcher.poll(now)
        if t0 is None:
            ctx.check_wait(now)
        elif now >= t0 + a.duration:
            break
    while pending:
        wait(pending[0])
        stamps.append(stamp(pending.popleft()))
    record_counts(ctx, stamps, watcher.t0, items_per_unit)


def record_counts(ctx, stamps, t0, items_per_unit):
    a = ctx.a
    counts = window_counts(stamps, t0, a.duration, a.window)
    inside = sum(1 for s in stamps if t0 <= s < t0 + a.duration)
    ctx.result.update(t0=t0, counts=counts, units=inside, items_per_unit=items_per_unit,
                      rate_units_s=inside / a.duration,
                      rate_items_s=inside * items_per_unit / a.duration)


def fake_background(ctx, unit_s, items_per_unit):
    a = ctx.a
    watcher = GoWatcher(a.sync)
    ctx.ready(fake=True)
    stamps = []
    while True:
        time.sleep(unit_s)
        now = time.monotonic()
        stamps.append(now)
        t0 = watcher.poll(now)
        if t0 is None:
            ctx.check_wait(now)
        elif now >= t0 + a.duration:
            break
    record_counts(ctx, stamps, watcher.t0, items_per_unit)


def gpu_info(torch):
    p = torch.cuda.get_device_properties(0)
    return {"torch": torch.__version__, "device": p.name, "sms": p.multi_processor_count}


def run_gemm(ctx):
    a = ctx.a
    n = a.size or 8192
    depth = a.depth or 4
    if a.fake:
        return fake_background(ctx, 0.0017, 1)
    import torch
    torch.manual_seed(os.getpid())
    A = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    B = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    C = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream() if a.side else None
    y = torch.zeros(1 << 20, device="cuda") if a.side else None

    def work():
        torch.matmul(A, B, out=C)
        if side is not None:
            # Work of its own on a second stream, as an application with a copy or
            # communication stream has: it runs beside the GEMMs, not after them.
            with torch.cuda.stream(side):
                for _ in range(a.side):
                    y.add_(1)

    for _ in range(5):
        work()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(10):
        work()
    e1.record()
    e1.synchronize()
    info = gpu_info(torch)
    info.update(gemm_ms=e0.elapsed_time(e1) / 10, size=n, depth=depth, side=a.side)
    background(ctx, torch, work, depth, a.poll or "sleep", 1, 3, info)


def run_small(ctx):
    a = ctx.a
    n = a.size or 2048
    depth = a.depth or 2
    if a.fake:
        return fake_background(ctx, 0.0004, 1)
    import torch
    A = torch.randn(n, n, device="cuda", dtype=torch.float16)
    B = torch.randn(n, n, device="cuda", dtype=torch.float16)
    C = torch.empty(n, n, device="cuda", dtype=torch.float16)

    def work():
        for _ in range(4):
            torch.matmul(A, B, out=C)

    background(ctx, torch, work, depth, a.poll or "sleep", 1, 10, {"size": n, "depth": depth})


def run_trainer(ctx):
    a = ctx.a
    batch = a.batch or 64
    if a.fake:
        return fake_background(ctx, 0.028, batch)
    import torch
    import torch.nn.functional as F
    import torchvision
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50(weights=None).cuda().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    xs = [torch.randn(batch, 3, 224, 224, device="cuda") for _ in range(2)]
    ys = [torch.randint(0, 1000, (batch,), device="cuda") for _ in range(2)]
    step = [0]

    def work():
        k = step[0] % 2
        step[0] += 1
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(xs[k]), ys[k])
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    background(ctx, torch, work, a.depth or 2, a.poll or "sleep", batch, 8,
               {"batch": batch, "amp": "fp16+GradScaler"})


# ---------------------------------------------------------------------------------------------
# Foreground kinds: idle until t0, then one request every `interval` seconds.

def wait_go(ctx):
    while True:
        t0 = read_go(ctx.a.sync)
        if t0 is not None:
            return t0
        now = time.monotonic()
        ctx.check_wait(now)
        time.sleep(0.002)


def serve(ctx, request, gpu_ms=None):
    """Runs the request schedule; request() does one request and returns when its result is
    on the host. gpu_ms(), if given, returns the GPU time of the last request (ms)."""
    a = ctx.a
    t0 = wait_go(ctx)
    n = int(round(a.duration / a.interval))
    lat, late, gpu, enq, span = [], [], [], [], []
    for k in range(n):
        arrival = t0 + k * a.interval
        sleep_until(arrival)
        start = time.monotonic()
        parts = request(k)
        done = time.monotonic()
        lat.append((done - arrival) * 1000.0)
        late.append((start - arrival) * 1000.0)
        if gpu_ms is not None:
            gpu.append(gpu_ms())
        if parts is not None:
            enq.append(round(parts[0], 4))
            span.append(round(parts[1], 4))
    ctx.result.update(t0=t0, requests=n, interval_ms=a.interval * 1000.0,
                      latency_ms=[round(x, 4) for x in lat],
                      start_late_ms_max=round(max(late), 4) if late else None)
    if enq:
        # Where a request's time goes: enqueue_ms, the host time to enqueue it (a wait for
        # the token shows here); gpu_span_ms, from its first operation starting on the GPU to
        # its last completing. The rest of latency_ms is the wait for the GPU to start it
        # (work of another context in flight) and the host noticing completion.
        ctx.result.update(enqueue_ms=enq, gpu_span_ms=span)
    if gpu:
        gpu.sort()
        ctx.result.update(gpu_ms_mean=sum(gpu) / len(gpu), gpu_ms_p50=gpu[len(gpu) // 2])


def fake_serve(ctx, ms):
    ctx.ready(fake=True)
    serve(ctx, lambda k: time.sleep(ms / 1000.0), lambda: ms)


def spin_until_done(ev):
    while not ev.query():
        pass


def run_service(ctx):
    a = ctx.a
    batch = a.batch or 8
    if a.fake:
        return fake_serve(ctx, 2.0)
    import torch
    import torchvision
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50(weights=None).cuda().half().eval()
    static_in = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.float16)
    host_in = [torch.randn(batch, 3, 224, 224, dtype=torch.float16).pin_memory() for _ in range(4)]
    host_out = torch.empty(batch, 1000, dtype=torch.float16).pin_memory()
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(5):
                model(static_in)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = model(static_in)
    torch.cuda.synchronize()
    ev_a, ev_b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ev_first = torch.cuda.Event(enable_timing=True)
    done = torch.cuda.Event(enable_timing=True)

    def request(k):
        t = time.monotonic()
        ev_first.record()
        static_in.copy_(host_in[k % len(host_in)], non_blocking=True)
        ev_a.record()
        graph.replay()
        ev_b.record()
        host_out.copy_(static_out, non_blocking=True)
        done.record()
        enqueued = time.monotonic()
        spin_until_done(done)
        return (enqueued - t) * 1000.0, ev_first.elapsed_time(done)

    for k in range(30):
        request(k)
    t = time.monotonic()
    for k in range(20):
        request(k)
    warm_ms = (time.monotonic() - t) * 1000.0 / 20
    info = gpu_info(torch)
    info.update(batch=batch, request_ms_warm=warm_ms, gpu_ms_warm=ev_a.elapsed_time(ev_b))
    ctx.ready(**info)
    serve(ctx, request, lambda: ev_a.elapsed_time(ev_b))


def run_probe(ctx):
    a = ctx.a
    if a.fake:
        return fake_serve(ctx, 0.02)
    import torch
    x = torch.zeros(1, device="cuda")
    done = torch.cuda.Event()

    def request(k):
        x.add_(1)
        done.record()
        spin_until_done(done)

    for k in range(100):
        request(k)
    ctx.ready()
    serve(ctx, request)


def main():
    a = parse()
    ctx = Ctx(a)
    try:
        {"gemm": run_gemm, "small": run_small, "trainer": run_trainer,
         "service": run_service, "probe": run_probe}[a.kind](ctx)
        ctx.finish()
    except BaseException as e:  # noqa: BLE001 - every failure goes into the result
        ctx.result["error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
        write_json(os.path.join(a.sync, f"result.{a.id}.json"), ctx.result)
        sys.exit(1)


if __name__ == "__main__":
    main()
