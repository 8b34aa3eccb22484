"""The GPU programs of the preemption benchmark (bench/preemption/run.py starts them), each
printing one JSON object a line on stdout, flushed, with `t` (CLOCK_MONOTONIC seconds):

  holder   --gib G             holds G GiB filled with a known pattern and checks it in a loop:
                               {"event": "ready", "bytes": ...}, then every --report-s seconds
                               {"event": "alive", "iterations": N, "pattern_ok": bool}
  trainer  --ballast-gib G     ResNet-50 training (torchvision, weights=None, synthetic fixed
           --batch B           batch, fp16 autocast, SGD) beside a G GiB ballast of known
                               content: {"event": "ready"}, then per step
                               {"event": "step", "step": N, "loss": L, "ballast_ok": bool
                               (checked every --check-every steps, else null)}
  service  --gib G             a high-priority inference service: allocates G GiB at once
           --seconds S         (timed: what the scheduler had to free), then serves ResNet-50
                               batch-1 fp16 requests for S seconds: {"event": "memory",
                               "asked": t0, "got": t1, "seconds": t1 - t0, "ok": bool} and
                               {"event": "done", "requests": N, "p50_ms": ..., "p99_ms": ...}

For bench/preemption/fast.py:

  gemm-trainer --ballast-gib G  G tensors of 1 GiB (int32), each filled with a pattern of its own
           --n N --per-step K  that depends on every element's position (so memory that comes
                               back at the wrong place shows), checked in full once filled:
                               {"event": "verify", "when": "start", "ok": bool, "bad": [...]};
                               {"event": "ready", "ballast_bytes": ...}; then a loop of steps of K
                               bf16 N x N matmuls and a synchronize, with
                               {"event": "rate", "steps": total, "rate": steps/s} every --report-s
                               (at a step's end) and {"event": "stall", "began", "ended",
                               "seconds"} after a step that took over --stall-s. SIGUSR1: the
                               ballast is checked in full again at the next step's end
                               ({"event": "verify", "when": "asked", ...}).
  alloc-service --gib G        creates its context, says {"event": "ready", "free", "total"} (as
           --seconds S         CUDA reports them to it), waits for a line on stdin, then
                               allocates G GiB at once with torch.empty, timed:
                               {"event": "memory", "asked", "got", "seconds", "ok", "error"};
                               fills it, holds it S seconds, frees it (del, empty_cache):
                               {"event": "freed", "asked", "t", "seconds"}. Exit 1 when the
                               allocation failed.

They run under LD_PRELOAD=libcuslice.so in a cuslice tenant, or natively (the holder, for the
raw checkpoint API's baseline; the trainer and the service, for what happens without cuslice)."""
import argparse
import json
import math
import sys
import time


def emit(**fields):
    fields["t"] = time.monotonic()
    print(json.dumps(fields), flush=True)


def pattern(torch, gib):
    """G GiB of float32 holding 0, 1, ..., 1023 over and over, and that row."""
    row = torch.arange(1024, device="cuda", dtype=torch.float32)
    return row.repeat(gib * (1 << 30) // 4 // 1024), row


def pattern_ok(x, row, chunk_rows=1 << 16):
    """Whether x still holds the pattern, checked a chunk at a time (no copy of x)."""
    m = x.view(-1, 1024)
    for i in range(0, m.shape[0], chunk_rows):
        if bool((m[i:i + chunk_rows] != row).any()):
            return False
    return True


def holder(a):
    import torch
    x, row = pattern(torch, a.gib)
    torch.cuda.synchronize()
    emit(event="ready", bytes=x.numel() * 4)
    iterations, last = 0, time.monotonic()
    while True:
        ok = pattern_ok(x, row)
        iterations += 1
        if time.monotonic() - last >= a.report_s or not ok:
            emit(event="alive", iterations=iterations, pattern_ok=ok)
            last = time.monotonic()


def trainer(a):
    import torch
    import torch.nn.functional as F
    import torchvision
    torch.manual_seed(0)
    ballast, row = pattern(torch, a.ballast_gib) if a.ballast_gib > 0 else (None, None)
    model = torchvision.models.resnet50(weights=None).cuda().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(a.batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (a.batch,), device="cuda")
    torch.cuda.synchronize()
    emit(event="ready", ballast_bytes=0 if ballast is None else ballast.numel() * 4)
    step = 0
    while a.steps == 0 or step < a.steps:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        step += 1
        ok = None
        if ballast is not None and step % a.check_every == 0:
            ok = pattern_ok(ballast, row)
        emit(event="step", step=step, loss=float(loss.item()), ballast_ok=ok)


def service(a):
    import torch
    import torchvision
    torch.cuda.init()
    asked = time.monotonic()
    try:
        block = torch.empty(a.gib * (1 << 30), dtype=torch.uint8, device="cuda")
        block.fill_(7)
        torch.cuda.synchronize()
        ok = True
    except RuntimeError as e:  # torch.cuda.OutOfMemoryError is a RuntimeError
        ok = False
        emit(event="error", what=str(e).splitlines()[0])
    got = time.monotonic()
    emit(event="memory", asked=asked, got=got, seconds=got - asked, ok=ok)
    if not ok:
        return 1
    model = torchvision.models.resnet50(weights=None).cuda().half().eval()
    x = torch.randn(1, 3, 224, 224, device="cuda", dtype=torch.float16)
    latencies = []
    end = time.monotonic() + a.seconds
    with torch.no_grad():
        while time.monotonic() < end:
            start = time.monotonic()
            model(x)
            torch.cuda.synchronize()
            latencies.append((time.monotonic() - start) * 1e3)
            time.sleep(0.01)
    latencies.sort()
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else None
    emit(event="done", requests=len(latencies), p50_ms=pick(0.5), p99_ms=pick(0.99), block_ok=bool((block[:1 << 20] == 7).all()))
    return 0


# The gemm-trainer's ballast: element j of tensor i holds (j * 0x9E3779B1 + (i + 1) * 0x85EBCA6B)
# & 0x7FFFFFFF, computed in int64 on the GPU a chunk at a time (j < 2^28, so no overflow).
BALLAST_ELEMS = (1 << 30) // 4
CHUNK = 1 << 25


def expected_chunk(torch, i, start, n):
    x = torch.arange(start, start + n, dtype=torch.int64, device="cuda")
    x.mul_(0x9E3779B1).add_((i + 1) * 0x85EBCA6B).bitwise_and_(0x7FFFFFFF)
    return x.to(torch.int32)


def fill_ballast(torch, gib):
    tensors = []
    for i in range(gib):
        t = torch.empty(BALLAST_ELEMS, dtype=torch.int32, device="cuda")
        for start in range(0, BALLAST_ELEMS, CHUNK):
            t[start:start + CHUNK] = expected_chunk(torch, i, start, CHUNK)
        tensors.append(t)
    return tensors


def verify_ballast(torch, tensors):
    """Every element of every tensor against its pattern: the indices of the tensors that differ
    and how many elements do."""
    bad, wrong = [], 0
    for i, t in enumerate(tensors):
        count = torch.zeros((), dtype=torch.int64, device="cuda")
        for start in range(0, BALLAST_ELEMS, CHUNK):
            count += (t[start:start + CHUNK] != expected_chunk(torch, i, start, CHUNK)).sum()
        n = int(count.item())
        if n:
            bad.append(i)
            wrong += n
    return bad, wrong


def gemm_trainer(a):
    import signal
    import torch
    asked = []
    signal.signal(signal.SIGUSR1, lambda *_: asked.append(1))

    def verify(when):
        t0 = time.monotonic()
        bad, wrong = verify_ballast(torch, ballast)
        emit(event="verify", when=when, tensors=len(ballast), ok=not bad, bad=bad, wrong_elements=wrong,
             seconds=time.monotonic() - t0)

    t0 = time.monotonic()
    ballast = fill_ballast(torch, a.ballast_gib)
    torch.cuda.synchronize()
    filled_s = time.monotonic() - t0
    verify("start")
    torch.cuda.empty_cache()  # the pattern's scratch memory: the trainer holds its ballast and matmuls only
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16, generator=g) / a.n ** 0.5
    y = torch.empty_like(x)
    torch.matmul(x, w, out=y)
    torch.cuda.synchronize()
    emit(event="ready", ballast_bytes=len(ballast) * BALLAST_ELEMS * 4, fill_seconds=filled_s)
    steps, last_report, last_steps = 0, time.monotonic(), 0
    prev = last_report
    while True:
        for _ in range(a.per_step):
            torch.matmul(x, w, out=y)
        torch.cuda.synchronize()
        steps += 1
        now = time.monotonic()
        if now - prev > a.stall_s:
            emit(event="stall", began=prev, ended=now, seconds=now - prev, step=steps)
        prev = now
        if now - last_report >= a.report_s:
            emit(event="rate", steps=steps, rate=(steps - last_steps) / (now - last_report))
            last_report, last_steps = now, steps
        if asked:
            asked.clear()
            verify("asked")
            prev = last_report = time.monotonic()
            last_steps = steps


def alloc_service(a):
    import torch
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    emit(event="ready", free=free, total=total)
    if not sys.stdin.readline():
        return 2  # nobody will say when: the benchmark went away
    asked = time.monotonic()
    error = None
    try:
        block = torch.empty(a.gib * (1 << 30), dtype=torch.uint8, device="cuda")
    except RuntimeError as e:  # torch.cuda.OutOfMemoryError is a RuntimeError
        error = str(e).splitlines()[0]
    got = time.monotonic()
    emit(event="memory", asked=asked, got=got, seconds=got - asked, ok=error is None, error=error)
    if error is not None:
        return 1
    t0 = time.monotonic()
    block.fill_(7)
    torch.cuda.synchronize()
    emit(event="filled", seconds=time.monotonic() - t0)
    # What a service does next with its memory: its first kernels load their modules, cuBLAS
    # and cuDNN take their workspaces, the caching allocator its next blocks. A card left with
    # only what the allocation lacked fails here with an error no framework recovers from.
    t0 = time.monotonic()
    try:
        x = torch.randn(4096, 4096, device="cuda")
        y = (x @ x).float()
        conv = torch.nn.functional.conv2d(torch.randn(8, 64, 56, 56, device="cuda"), torch.randn(64, 64, 3, 3, device="cuda"))
        ordered = torch.sort(torch.randn(1 << 24, device="cuda")).values
        checksum = float(y.sum() + conv.sum() + ordered[:1].sum())
        torch.cuda.synchronize()
        emit(event="computed", ok=math.isfinite(checksum), seconds=time.monotonic() - t0)
        del x, y, conv, ordered
    except RuntimeError as e:
        emit(event="computed", ok=False, error=str(e).splitlines()[0], seconds=time.monotonic() - t0)
        return 1
    time.sleep(a.seconds)
    t0 = time.monotonic()
    del block
    torch.cuda.empty_cache()
    t1 = time.monotonic()
    emit(event="freed", asked=t0, seconds=t1 - t0)
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["holder", "trainer", "service", "gemm-trainer", "alloc-service"])
    p.add_argument("--gib", type=int, default=8)
    p.add_argument("--report-s", type=float, default=0.5)
    p.add_argument("--ballast-gib", type=int, default=0)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=0, help="0: until killed")
    p.add_argument("--check-every", type=int, default=20)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--n", type=int, default=8192, help="gemm-trainer: the matmuls' size")
    p.add_argument("--per-step", type=int, default=4, help="gemm-trainer: matmuls a step")
    p.add_argument("--stall-s", type=float, default=0.5, help="gemm-trainer: a step this long is a stall")
    a = p.parse_args()
    return {"holder": holder, "trainer": trainer, "service": service, "gemm-trainer": gemm_trainer,
            "alloc-service": alloc_service}[a.mode](a) or 0


if __name__ == "__main__":
    sys.exit(main())
