"""CUDA-graph captures of ResNet-50 (cuDNN benchmark mode) in a process, while another
process loops large GEMMs: each capture must succeed. Run natively and under cuslice by
capture_stress.sh. Prints one JSON line: captures tried, succeeded, the first error."""
import json
import subprocess
import sys
import time

import torch
import torchvision

GEMM_LOOP = """
import torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
c = torch.empty_like(a)
evs = []
print("ready", flush=True)
while True:
    torch.matmul(a, b, out=c)
    e = torch.cuda.Event(); e.record(); evs.append(e)
    if len(evs) > 4:
        evs.pop(0).synchronize()
"""


def main():
    captures = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    gemm = subprocess.Popen([sys.executable, "-c", GEMM_LOOP], stdout=subprocess.PIPE, text=True,
                            env={**__import__("os").environ, "CUSLICE_TENANT": "gemm"})
    assert gemm.stdout.readline().strip() == "ready"
    result = {"captures": captures, "ok": 0, "error": None}
    try:
        torch.backends.cudnn.benchmark = True
        for k in range(captures):
            # The first capture follows cuDNN's benchmarking, done beside the GEMMs.
            model = torchvision.models.resnet50(weights=None).cuda().half().eval()
            x = torch.randn(8, 3, 224, 224, device="cuda", dtype=torch.float16)
            with torch.no_grad():
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(3):
                        model(x)
                torch.cuda.current_stream().wait_stream(side)
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                try:
                    with torch.cuda.graph(graph):
                        out = model(x)
                except Exception as e:  # noqa: BLE001 - reported, not hidden
                    result["error"] = f"capture {k}: {type(e).__name__}: {str(e).splitlines()[0]}"
                    break
                graph.replay()
                torch.cuda.synchronize()
                assert torch.isfinite(out).all()
            result["ok"] += 1
            del graph, model
    finally:
        gemm.kill()
        gemm.wait()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
