#!/usr/bin/env bash
# nvidia-smi inside a tenant lists only the tenant's own processes. A scheduler with
# tenants a and b, one PyTorch process holding GPU memory in each, then nvidia-smi (its table
# and --query-compute-apps) run under the hook in tenant a, in tenant b, and natively: a must
# see a's process only, b b's only, native both. Needs a GPU, python3 with torch, and cuslice:
#   bash tests/gpu/smi_filter.sh [--cuslice PATH] [--diagnose]
# PATH: the release tarball, an unpacked tarball or installation, or a build folder
# (scripts/cuslice-tree.sh; default: the cuslice-scheduler on PATH, else ./build).
# --diagnose also builds tests/gpu/rm_probe.c (gcc) and logs every RM control ioctl nvidia-smi
# makes (cmd in hex, paramsSize, status; GET_PIDS's pid table), natively and under the hook,
# so that if the process list does not come from NV2080_CTRL_CMD_GPU_GET_PIDS (0x2080018d) we
# learn what it comes from. Prints PASS/FAIL lines; exits 1 on any FAIL, 2 when it cannot run.
# Logs stay in /tmp/cuslice-smi.PID (and are copied to $OUT/smi_filter when OUT is set).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/scripts/cuslice-tree.sh"
PY=${PYTHON:-python3}
diagnose=0
path=""
while (($#)); do
  case $1 in
    --diagnose) diagnose=1; shift ;;
    --cuslice) path=${2:?--cuslice needs a path}; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then echo "SKIP: no NVIDIA GPU here"; exit 2; fi
B=$(cuslice_tree "$path") || { echo "SKIP: no cuslice to test"; exit 2; }
HOOK=$B/lib/libcuslice.so
if ! "$PY" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then echo "SKIP: $PY has no CUDA torch"; exit 2; fi
echo "cuslice: $B ($(cuslice_version "$B"))"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sed 's/^/gpu /'

work=/tmp/cuslice-smi.$$
mkdir -p "$work"
sock=$work/cuslice.sock
passed=0
failed=0
pass() { echo "PASS: $*"; passed=$((passed + 1)); }
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }

daemon=""
holder_a=""
holder_b=""
cleanup() {
  for p in $holder_a $holder_b $daemon; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  if [ -n "${OUT:-}" ]; then mkdir -p "$OUT/smi_filter" && cp -r "$work"/. "$OUT/smi_filter/" 2>/dev/null; fi
}
trap cleanup EXIT

cat >"$work/cuslice.yaml" <<'YAML'
tenants:
  - {name: a, allow_env: true, memory: 8GiB, compute: {share: 50%}}
  - {name: b, allow_env: true, memory: 8GiB, compute: {share: 50%}}
YAML
cat >"$work/holder.py" <<'PY'
import os, sys, time, torch
x = torch.empty(int(sys.argv[1]) << 20, dtype=torch.uint8, device="cuda")
x.fill_(1)
torch.cuda.synchronize()
print(f"ready {os.getpid()}", flush=True)
time.sleep(float(sys.argv[2]))
PY

"$B/bin/cuslice-scheduler" --config "$work/cuslice.yaml" --socket "$sock" --shm-name "/cuslice-smi-$$" \
  >"$work/daemon.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
if [ ! -S "$sock" ]; then echo "FAIL: the scheduler did not start"; cat "$work/daemon.log"; exit 1; fi

# One PyTorch process per tenant, 1 GiB each, under the hook.
CUSLICE_SOCKET=$sock CUSLICE_TENANT=a LD_PRELOAD=$HOOK "$PY" "$work/holder.py" 1024 400 \
  >"$work/holder_a.out" 2>"$work/holder_a.err" &
holder_a=$!
CUSLICE_SOCKET=$sock CUSLICE_TENANT=b LD_PRELOAD=$HOOK "$PY" "$work/holder.py" 1024 400 \
  >"$work/holder_b.out" 2>"$work/holder_b.err" &
holder_b=$!
for _ in $(seq 240); do
  grep -q '^ready' "$work/holder_a.out" && grep -q '^ready' "$work/holder_b.out" && break
  if ! kill -0 "$holder_a" 2>/dev/null || ! kill -0 "$holder_b" 2>/dev/null; then break; fi
  sleep 0.5
done
for t in a b; do
  if ! grep -q '^ready' "$work/holder_$t.out"; then
    echo "FAIL: tenant $t's PyTorch process did not start"; tail -20 "$work/holder_$t.err"; exit 1
  fi
done
pid_a=$(awk '/^ready/{print $2; exit}' "$work/holder_a.out")
pid_b=$(awk '/^ready/{print $2; exit}' "$work/holder_b.out")
echo "tenant a: pid $pid_a   tenant b: pid $pid_b"
sleep 1

# run_smi NAME [VAR=VALUE ...]: nvidia-smi's table and its compute-apps query, with those
# variables, into $work/NAME.table and $work/NAME.csv (stderr beside them).
run_smi() {
  local name=$1 rc
  shift
  timeout 60 env "$@" nvidia-smi >"$work/$name.table" 2>"$work/$name.table.err"
  rc=$?
  [ "$rc" = 0 ] || fail "$name: nvidia-smi exited $rc: $(head -c 300 "$work/$name.table.err")"
  timeout 60 env "$@" nvidia-smi --query-compute-apps=pid,used_memory --format=csv \
    >"$work/$name.csv" 2>"$work/$name.csv.err"
  rc=$?
  [ "$rc" = 0 ] || fail "$name: nvidia-smi --query-compute-apps exited $rc: $(head -c 300 "$work/$name.csv.err")"
}

# listed FILE PID: the pid is in nvidia-smi's process list in FILE (csv, or the table's
# Processes section).
listed() {
  case $1 in
    *.csv) tail -n +2 "$1" | cut -d, -f1 | tr -d ' ' | grep -qx "$2" ;;
    *) awk '/Processes:/{p=1} p' "$1" | grep -qw "$2" ;;
  esac
}

# expect NAME WANT_A WANT_B: in both of NAME's outputs, tenant a's and b's processes are
# listed (1) or not (0).
expect() {
  local name=$1 want_a=$2 want_b=$3 f got_a got_b
  for f in "$work/$name.table" "$work/$name.csv"; do
    got_a=0
    got_b=0
    listed "$f" "$pid_a" && got_a=1
    listed "$f" "$pid_b" && got_b=1
    if [ "$got_a" = "$want_a" ] && [ "$got_b" = "$want_b" ]; then
      pass "$name ${f##*.}: a's pid listed=$got_a, b's pid listed=$got_b"
    else
      fail "$name ${f##*.}: a's pid listed=$got_a (want $want_a), b's pid listed=$got_b (want $want_b)"
    fi
  done
}

run_smi native
run_smi tenant_a "LD_PRELOAD=$HOOK" "CUSLICE_SOCKET=$sock" CUSLICE_TENANT=a CUSLICE_LOG_LEVEL=info
run_smi tenant_b "LD_PRELOAD=$HOOK" "CUSLICE_SOCKET=$sock" CUSLICE_TENANT=b CUSLICE_LOG_LEVEL=info

for name in native tenant_a tenant_b; do
  echo "== $name: nvidia-smi --query-compute-apps"
  cat "$work/$name.csv"
  echo "== $name: nvidia-smi's Processes section"
  awk '/Processes:/{p=1} p' "$work/$name.table"
  if [ "$name" != native ]; then echo "== $name: the hook's stderr"; head -5 "$work/$name.table.err"; fi
done
expect native 1 1
expect tenant_a 1 0
expect tenant_b 0 1

if [ "$diagnose" = 1 ]; then
  echo "== diagnose: RM control ioctls (tests/gpu/rm_probe.c)"
  probe=$work/rm_probe.so
  if ! gcc -O2 -shared -fPIC -o "$probe" "$root/tests/gpu/rm_probe.c" -ldl 2>"$work/probe.build.err"; then
    fail "diagnose: cannot build rm_probe.c: $(head -c 300 "$work/probe.build.err")"
  else
    # native; under the hook with the probe after it (what the kernel answered) and before it
    # (what nvidia-smi was shown).
    for run in native raw shown; do
      case $run in
        native) pre=$probe; env_hook=() ;;
        raw) pre=$HOOK:$probe; env_hook=("CUSLICE_SOCKET=$sock" CUSLICE_TENANT=a) ;;
        shown) pre=$probe:$HOOK; env_hook=("CUSLICE_SOCKET=$sock" CUSLICE_TENANT=a) ;;
      esac
      for what in query table; do
        log=$work/probe.$run.$what.log
        : >"$log"
        if [ "$what" = query ]; then
          timeout 60 env "${env_hook[@]}" RM_PROBE_LOG="$log" LD_PRELOAD="$pre" \
            nvidia-smi --query-compute-apps=pid,used_memory --format=csv >/dev/null 2>>"$log"
        else
          timeout 60 env "${env_hook[@]}" RM_PROBE_LOG="$log" LD_PRELOAD="$pre" nvidia-smi >/dev/null 2>>"$log"
        fi
        echo "-- $run, nvidia-smi ${what}: $(grep -c '^rm ' "$log") RM controls; $(grep '^total' "$log" | tail -1)"
        echo "   RM controls by cmd (count cmd):"
        grep '^rm ' "$log" | awk '{print $2}' | sort | uniq -c | sort -rn | head -40 | sed 's/^/     /'
        echo "   GET_PIDS answers:"
        grep '^rm cmd=0x2080018d' "$log" | head -8 | sed 's/^/     /'
        grep -q '^rm ' "$log" ||
          echo "   no RM control went through libc's ioctl: nvidia-smi reaches the driver another way"
      done
    done
    if command -v strace >/dev/null; then
      echo "-- strace -f -c -e trace=ioctl, native query (compare with the probe's totals)"
      strace -f -c -e trace=ioctl nvidia-smi --query-compute-apps=pid --format=csv 2>&1 >/dev/null | tail -6
    fi
  fi
fi

echo "smi_filter: $passed passed, $failed failed"
[ "$failed" = 0 ]
