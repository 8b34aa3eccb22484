#!/usr/bin/env bash
# `cuslice run` of a PyTorch job under an auto-started scheduler, with `cuslice status` (table,
# --json, --watch) read while it runs and after it left. Needs a GPU and the bundle built by
# scripts/gpu-bundle.sh (carried as .gpu-carry):
#   run(command="bash tests/gpu/cli_live.sh", carry=[".gpu-carry"])
set -u
B=$PWD/.gpu-carry/bin
PY=${PYTHON:-python3}
export CUSLICE_SOCKET=/tmp/cuslice-live.sock
cat > /tmp/job.py <<'PY'
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")  # 2 GiB of the 4 GiB quota
free, total = torch.cuda.mem_get_info()
print(f"job: mem_get_info total {total >> 20} MiB free {free >> 20} MiB", flush=True)
end = time.time() + 8
n = 0
while time.time() < end:
    torch.matmul(a, b); n += 1
    if n % 50 == 0: torch.cuda.synchronize()
torch.cuda.synchronize()
print(f"job: {n} GEMMs", flush=True)
PY
"$B/cuslice" run --tenant trainer --memory 4GiB --share 50% -- "$PY" /tmp/job.py > /tmp/job.out 2>&1 &
runner=$!
sleep 5
echo "== cuslice status (table, job running)"; "$B/cuslice" status
echo "== cuslice status --json"; "$B/cuslice" status --json
echo "== cuslice status --watch 1 (3 s)"; timeout 3 "$B/cuslice" status --watch 1 | head -40
echo "== nvidia-smi"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv
wait $runner; echo "== cuslice run exit $?"; cat /tmp/job.out
sleep 3; echo "== after: status"; "$B/cuslice" status; echo "exit $?"
