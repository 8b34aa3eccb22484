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

They run under LD_PRELOAD=libcuslice.so in a cuslice tenant, or natively (the holder, for the
raw checkpoint API's baseline)."""
import argparse
import json
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["holder", "trainer", "service"])
    p.add_argument("--gib", type=int, default=8)
    p.add_argument("--report-s", type=float, default=0.5)
    p.add_argument("--ballast-gib", type=int, default=0)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=0, help="0: until killed")
    p.add_argument("--check-every", type=int, default=20)
    p.add_argument("--seconds", type=float, default=10)
    a = p.parse_args()
    return {"holder": holder, "trainer": trainer, "service": service}[a.mode](a) or 0


if __name__ == "__main__":
    sys.exit(main())
