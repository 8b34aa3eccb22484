"""An inference service for the spatial benchmark: one model in fp16, eval mode, captured in a
CUDA graph and replayed in a closed loop (a synchronisation after each replay, each timed).
Joins the start barrier (sync.py), keeps replaying while it waits, measures SECONDS from t0,
and prints one JSON line: model, batch, iterations/s, p50/p99 latency in ms, and the memory it
holds (torch.cuda.memory_reserved, and total minus free from cuMemGetInfo). An error (a
device fault in another process, a refused allocation) is reported in the line instead, with
the iterations done and when it came. Builds its models locally; downloads nothing.

    python3 service.py resnet50|encoder BATCH SECONDS
"""
import os
import sys
import time

import torch

from sync import Barrier, emit, fail, now

MODELS = ("resnet50", "encoder")


def build(model, batch):
    """The module and its input: ResNet-50 on 224x224 images, or a BERT-base-sized encoder
    (12 layers, d 768, 12 heads, feed-forward 3072) on sequences of 128."""
    if model == "resnet50":
        import torchvision
        net = torchvision.models.resnet50(weights=None)
        x = torch.randn(batch, 3, 224, 224)
    else:
        layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True)
        net = torch.nn.TransformerEncoder(layer, 12, enable_nested_tensor=False)
        x = torch.randn(batch, 128, 768)
    return net.cuda().half().eval(), x.cuda().half()


def capture(net, x):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            net(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        net(x)
    return graph


def replay(graph):
    t = time.perf_counter()
    graph.replay()
    torch.cuda.synchronize()
    return time.perf_counter() - t


def percentile(sorted_values, q):
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def memory():
    free, total = torch.cuda.mem_get_info()
    return {"reserved_mib": round(torch.cuda.memory_reserved() / 2**20, 1),
            "device_used_mib": round((total - free) / 2**20, 1),
            "device_total_mib": round(total / 2**20, 1)}


def measure(graph, t0, seconds, out):
    while now() < t0:
        replay(graph)
    lat, end = [], t0 + seconds
    try:
        while now() < end:
            lat.append(replay(graph))
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        out.update(error=f"{type(e).__name__}: {e}", error_after_s=round(now() - t0, 3))
    out["iterations"] = len(lat)
    out["window_s"] = round(min(now(), end) - t0, 3)
    lat.sort()
    out["it_per_s"] = round(len(lat) / max(out["window_s"], 1e-9), 2)
    out["p50_ms"] = None if not lat else round(percentile(lat, 0.50) * 1e3, 3)
    out["p99_ms"] = None if not lat else round(percentile(lat, 0.99) * 1e3, 3)


def main(model, batch, seconds):
    out = {"worker": "service", "model": model, "batch": batch, "pid": os.getpid()}
    barrier = Barrier()
    try:
        with torch.inference_mode():
            net, x = build(model, batch)
            try:
                graph = capture(net, x)
            except RuntimeError as e:
                if model != "encoder":
                    raise
                # The encoder's fused fast path, should this PyTorch not capture it: the
                # module's plain path instead, said so in the result.
                torch.cuda.synchronize()
                torch.backends.mha.set_fastpath_enabled(False)
                out["fastpath"] = f"off ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
                graph = capture(net, x)
        for _ in range(20):
            replay(graph)
        barrier.arrive()
        while barrier.poll() is None:
            replay(graph)
    except Exception as e:  # noqa: BLE001
        fail("service", e, model=model, batch=batch, stage="setup")
    measure(graph, barrier.t0, seconds, out)
    if "error" not in out:
        out.update(memory())
    emit(out)
    sys.exit(1 if "error" in out else 0)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in MODELS:
        sys.exit("usage: service.py resnet50|encoder BATCH SECONDS")
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))
