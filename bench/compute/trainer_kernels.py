"""The benchmark trainer's kernels (ResNet-50 batch 64, fp16 autocast, GradScaler, SGD), by
duration: how long a request of the high-priority service may wait behind the one kernel
that is running when it arrives (the hook preempts only between kernels).

    python3 bench/compute/trainer_kernels.py [--steps 5] [--batch 64] [--dump kernels.json]

Prints the count of kernels per step, GPU time per step, and the share of the GPU time spent
in kernels longer than each threshold (so the chance that a request arriving at a random
moment finds such a kernel running), with the longest kernels by name. --dump writes every
kernel's duration, for bench/compute/preemption_bound.py."""
import argparse
import collections
import json

import torch
import torch.nn.functional as F
import torchvision
from torch.profiler import ProfilerActivity, profile


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--dump", default="", help="write the kernel durations (us) to this JSON file")
    a = p.parse_args()
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50(weights=None).cuda().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(a.batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (a.batch,), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
    durs, longest = [], collections.defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time > 0:
            us = e.device_time  # microseconds
            durs.append(us)
            longest[e.name[:70]] = max(longest[e.name[:70]], us)
    if a.dump:
        with open(a.dump, "w") as f:
            json.dump({"steps": a.steps, "batch": a.batch, "durations_us": durs}, f)
    durs.sort()
    total = sum(durs)
    print(f"kernels per step {len(durs) / a.steps:.0f}, GPU ms per step {total / a.steps / 1000:.2f}, "
          f"median {durs[len(durs) // 2]:.1f} us, max {durs[-1]:.1f} us")
    for t in (100, 200, 300, 500, 750, 1000):
        share = sum(d for d in durs if d > t) / total
        print(f"  GPU time in kernels > {t:4d} us: {share * 100:5.1f}%  (count/step {sum(1 for d in durs if d > t) / a.steps:.1f})")
    print("longest kernels:")
    for name, us in sorted(longest.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {us:8.1f} us  {name}")


if __name__ == "__main__":
    main()
