"""Does work parked behind a closed GPU-side gate slow another process's kernels?

The question behind parking (docs/design/hook.md): while a higher-priority tenant holds the GPU, a
lower-priority tenant's launches queue behind a cuStreamWaitValue32 on a word the hook opens
when the token comes back, instead of stopping its launching thread. That only helps if a
stream parked on such a wait does not get its context time-sliced in against the other
process. Results: docs/evidence/benchmarks.md, "The gate".

    python3 tests/gpu/gate_probe.py [--requests N]

A "service" process times requests (one 4096^2 bf16 GEMM chain, about 1 ms, every 5 ms) in
three phases, while a second process is:
  idle    - registered on the GPU, nothing queued;
  parked  - 200 8192^2 GEMMs queued on a stream behind cuStreamWaitValue32(word >= 1) on a
            word that stays 0 until the phase ends;
  running - the same GEMMs free to run (native time-slicing, for reference).
Prints p50/p99 per phase and one JSON line. No hook, no scheduler: the bare GPU.
"""
import argparse
import ctypes
import json
import multiprocessing as mp
import statistics
import time


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(q * len(xs) + 0.999999) - 1))]


def other(phase_q, done_q):
    import torch
    cuda = ctypes.CDLL("libcuda.so.1")
    wait = cuda.cuStreamWaitValue32_v2
    wait.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(8192, 8192, device="cuda", dtype=torch.bfloat16)
    word = torch.zeros(1, dtype=torch.int32, device="cuda")
    parked = torch.cuda.Stream()
    opener = torch.cuda.Stream()
    with torch.cuda.stream(parked):  # cuBLAS set up on this stream before it is ever parked
        torch.mm(a, b, out=c)
    torch.cuda.synchronize()
    done_q.put("ready")
    while True:
        phase = phase_q.get()
        if phase == "stop":
            return
        if phase == "parked":
            word.zero_()
            torch.cuda.synchronize()
            rc = wait(ctypes.c_void_p(parked.cuda_stream), word.data_ptr(), 1, 0)  # GEQ
            assert rc == 0, f"cuStreamWaitValue32_v2: {rc}"
            with torch.cuda.stream(parked):
                for _ in range(200):
                    torch.mm(a, b, out=c)
            done_q.put("parked")
            phase_q.get()  # end of phase
            with torch.cuda.stream(opener):
                word.fill_(1)
            torch.cuda.synchronize()
            done_q.put("drained")
        elif phase == "running":
            done_q.put("running")
            stop = False
            while not stop:
                for _ in range(4):
                    torch.mm(a, b, out=c)
                torch.cuda.synchronize()
                stop = not phase_q.empty()
            phase_q.get()
            done_q.put("drained")
        else:  # idle
            done_q.put("idle")
            phase_q.get()
            done_q.put("drained")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=300)
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    phase_q, done_q = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=other, args=(phase_q, done_q))
    p.start()
    import torch
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    done = torch.cuda.Event()

    def request():
        t = time.perf_counter()
        for _ in range(8):
            torch.mm(x, y)
        done.record()
        while not done.query():
            pass
        return (time.perf_counter() - t) * 1e3

    for _ in range(50):
        request()
    assert done_q.get(timeout=120) == "ready"
    results = {}
    for phase in ["idle", "parked", "running", "idle"]:
        phase_q.put(phase)
        print(f"phase {phase}", flush=True)
        assert done_q.get(timeout=60) == phase
        lat = []
        for _ in range(args.requests):
            lat.append(request())
            time.sleep(0.005)
        phase_q.put("end")
        assert done_q.get(timeout=60) == "drained"
        key = phase if phase not in results else phase + "_again"
        results[key] = {"p50_ms": round(statistics.median(lat), 3), "p99_ms": round(percentile(lat, 0.99), 3),
                        "max_ms": round(max(lat), 3)}
        print(f"{key:12s} p50 {results[key]['p50_ms']:.3f} ms  p99 {results[key]['p99_ms']:.3f} ms  "
              f"max {results[key]['max_ms']:.3f} ms", flush=True)
    phase_q.put("stop")
    p.join(timeout=60)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
