#!/usr/bin/env bash
# `cuslice run` of a PyTorch job under an auto-started scheduler, with `cuslice status` (table,
# --json, --watch) read while it runs and after it left:
#
#   bash tests/gpu/cli_live.sh [--cuslice PATH]
#
# PATH: the release tarball, an unpacked tarball or installation, or a build folder
# (scripts/cuslice-tree.sh). Needs a GPU and PyTorch. Checks that the job sees its 4 GiB quota
# and finishes, that `status --json` shows its tenant, pid and quota while it runs, and that
# the scheduler leaves with it. Exit status 0 when all hold, 1 otherwise, 2 when it cannot run.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/scripts/cuslice-tree.sh"
path=""
if [ "${1:-}" = --cuslice ]; then path=${2:?--cuslice needs a path}; fi
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then echo "SKIP: no NVIDIA GPU here"; exit 2; fi
tree=$(cuslice_tree "$path") || exit 2
B=$tree/bin
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then echo "SKIP: $PY has no CUDA torch"; exit 2; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CUSLICE_SOCKET=$work/cuslice.sock
failed=0
check() {  # check DESCRIPTION COMMAND...: PASS/FAIL line
  if "${@:2}"; then echo "PASS: $1"; else echo "FAIL: $1"; failed=1; fi
}
cat > "$work/job.py" <<'PY'
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
"$B/cuslice" run --tenant trainer --memory 4GiB --share 50% -- "$PY" "$work/job.py" > "$work/job.out" 2>&1 &
runner=$!
# Until the job has registered (its first CUDA call, after importing torch: seconds on a
# fresh machine), at most a minute.
for _ in $(seq 120); do
  "$B/cuslice" status --json 2>/dev/null | "$PY" -c '
import json, sys
t = [t for t in json.load(sys.stdin)["tenants"] if t["name"] == "trainer"]
sys.exit(not (t and t[0]["pids"]))' && break
  sleep 0.5
done
echo "== cuslice status (table, job running)"; "$B/cuslice" status
echo "== cuslice status --json"; "$B/cuslice" status --json | tee "$work/status.json"
echo "== cuslice status --watch 1 (3 s)"; timeout 3 "$B/cuslice" status --watch 1 | head -40
echo "== nvidia-smi"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv
wait $runner; rc=$?
echo "== cuslice run exit $rc"; cat "$work/job.out"
check "the job exited 0" test "$rc" = 0
check "the job saw its 4 GiB quota" grep -q 'total 4096 MiB' "$work/job.out"
check "status --json showed tenant trainer with a pid and a 4 GiB quota" "$PY" -c '
import json, sys
t = [t for t in json.load(open(sys.argv[1]))["tenants"] if t["name"] == "trainer"]
sys.exit(not (t and t[0]["pids"] and t[0]["memory_quota_bytes"] == 4 << 30))' "$work/status.json"
sleep 3
echo "== after: status"; "$B/cuslice" status; after=$?
check "the scheduler left with its last client (status exits 4: no scheduler)" test "$after" = 4
exit $failed
