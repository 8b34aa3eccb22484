#!/usr/bin/env python3
"""One rank of the multi-GPU benchmark's data-parallel run, started by torchrun (one process
per GPU), natively or as a tenant of `cuslice run`; knows nothing of cuslice.

Trains a small model with DistributedDataParallel for --steps steps, then times --iters
all-reduces of --mib MiB (NCCL) and reports the bus bandwidth as nccl-tests defines it
(bytes x 2(n-1)/n per second). With --extra-gib it first tries to take that many GiB more than
the run needs, to show how a quota that is too small fails: with the framework's own
out-of-memory error. Writes its result to --results/rank<N>.json; holds its memory --hold
seconds after that, so that the harness can read the driver's figure per process.
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--iters", type=int, default=40)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--extra-gib", type=float, default=0.0)
    p.add_argument("--hold", type=float, default=2.0)
    p.add_argument("--results", required=True)
    a = p.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    out = {"rank": rank, "world": world, "pid": os.getpid(),
           "visible": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
           "total_bytes": torch.cuda.mem_get_info()[1]}
    try:
        if a.extra_gib:
            extra = torch.empty(int(a.extra_gib * (1 << 30)), dtype=torch.uint8, device="cuda")
            out["extra_allocated"] = extra.numel()
            del extra
        model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(8)]).cuda()
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
        opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
        for _ in range(a.steps):
            x = torch.randn(256, 4096, device="cuda")
            ddp(x).square().mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        buf = torch.ones(a.mib << 18, dtype=torch.float32, device="cuda")
        for _ in range(5):
            dist.all_reduce(buf)
        torch.cuda.synchronize()
        dist.barrier()
        t = time.perf_counter()
        for _ in range(a.iters):
            dist.all_reduce(buf)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t) / a.iters
        size = buf.numel() * buf.element_size()
        out.update(ok=True, busbw_gbs=size * 2 * (world - 1) / world / dt / 1e9, allreduce_ms=dt * 1e3,
                   torch_allocated=torch.cuda.memory_allocated(), torch_reserved=torch.cuda.memory_reserved())
    except torch.cuda.OutOfMemoryError as e:
        out.update(ok=False, oom=True, error=str(e).splitlines()[0][:200])
    tmp = os.path.join(a.results, f".rank{rank}.json")
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, os.path.join(a.results, f"rank{rank}.json"))
    time.sleep(a.hold)
    if out.get("ok"):
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
