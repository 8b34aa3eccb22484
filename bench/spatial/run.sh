#!/usr/bin/env bash
# Tenants side by side on one GPU: native time-slicing, NVIDIA MPS (a private daemon of this
# run), cuslice time-sliced and cuslice's spatial mode (its tenants run side by side through
# the MPS daemon the scheduler starts), the configurations alternated within each round:
#   a) 4 inference services (ResNet-50 batch 1, then a BERT-base-sized encoder batch 1, seq
#      128; fp16, CUDA graphs): aggregate it/s over one service alone, worst p99 over alone;
#      also cuslice-in-mps: time-sliced tenants whose processes are clients of an MPS daemon
#      the user started themselves;
#   b) three GEMM tenants limited to 50/25/25% of the SMs (compute.sm; MPS: the clients'
#      CUDA_MPS_ACTIVE_THREAD_PERCENTAGE): each one's share of the total throughput;
#   c) a high-priority ResNet-50 batch-8 service beside three low batch-1 ones (mps, mps with
#      CUDA_MPS_CLIENT_PRIORITY=1 for the lows, cuslice spatial with priorities, and with the
#      lows also at `sm: 30%`): high's p99 over alone, the lows' it/s over theirs under plain mps;
#   d) a spatial group of two services beside a time-sliced GEMM trainer (`spatial: false`),
#      shares 25+25/50: the GPU time shares `cuslice status --json` reports, the throughputs;
#   e) four spatial services with 4 GiB quotas: the memory nvidia-smi shows for each, and a
#      fifth tenant asking 3 GiB past its 2 GiB quota, which must get torch.OutOfMemoryError;
#   f) a tenant that launches a kernel at an illegal address beside three services (native,
#      mps, cuslice spatial): which survived, the errors the others got, and whether a new
#      service starts afterwards.
#
#   bash bench/spatial/run.sh --cuslice PATH [ROUNDS]       # ROUNDS 2; about 8 minutes a round on an H200
#   bash bench/spatial/run.sh --cuslice PATH --quick [ROUNDS]  # a) with ResNet-50 and b) only; ROUNDS 1,
#                                                              # about 3 minutes
#
# --cuslice PATH: the release tarball, an unpacked tarball or installation, or a build folder
# (scripts/cuslice-tree.sh). Needs python3 (PYTHON) with torch and torchvision, and
# nvidia-cuda-mps-control on PATH (MPS_CONTROL: another one, also given to the scheduler). Runs
# on GPU 0 as nvidia-smi numbers it, and changes no GPU setting. MEASURE_S (default 8, at
# least 4) is each run's measured window. Writes $OUT/spatial.log (one line per scenario and
# configuration, printed at the end), $OUT/spatial-results.jsonl (every worker's line) and
# $OUT/spatial-runs/ (each run's configuration and logs); OUT defaults to build-gpu/out.
# Exits 2 where it cannot run (no GPU among them), 1 when a run failed or a worker got an error
# outside scenario f.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$root/scripts/cuslice-tree.sh"
OUT=${OUT:-$root/build-gpu/out}
MEASURE_S=${MEASURE_S:-8}
usage() { echo "usage: run.sh --cuslice PATH [--quick] [ROUNDS]"; }
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { echo "no NVIDIA GPU here"; exit 2; }
path="" quick=0 rounds=""
while (($#)); do
  case $1 in
    --cuslice) path=${2:?--cuslice needs a path}; shift 2 ;;
    --quick) quick=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *[!0-9]* | "") echo "unknown argument: $1"; usage; exit 2 ;;
    *) rounds=$1; shift ;;
  esac
done
[ -n "$path" ] || { usage; exit 2; }
[ -n "$rounds" ] || { [ $quick = 1 ] && rounds=1 || rounds=2; }
[[ $MEASURE_S =~ ^[0-9]+$ ]] && ((MEASURE_S >= 4)) || { echo "MEASURE_S=$MEASURE_S: expected whole seconds, at least 4"; exit 2; }
((rounds >= 1)) || { echo "ROUNDS must be at least 1"; exit 2; }
tree=$(cuslice_tree "$path") || exit 2
py=${PYTHON:-python3}
"$py" -c 'import torch, torchvision; assert torch.cuda.is_available(), "torch sees no GPU"' ||
  { echo "needs $py with torch and torchvision on a CUDA GPU"; exit 2; }
mps_control=${MPS_CONTROL:-$(command -v nvidia-cuda-mps-control || true)}
[ -n "$mps_control" ] || echo "warning: no nvidia-cuda-mps-control on PATH: the mps and spatial configurations will fail"
# CUDA's device 0 is then nvidia-smi's GPU 0, the one the scheduler's `gpus: [0]` names.
unset CUDA_VISIBLE_DEVICES
export CUDA_DEVICE_ORDER=PCI_BUS_ID
# A MPS server already running (not ours) is left alone; otherwise each run waits for the
# previous run's server to be gone before the next starts one.
pgrep -f '^([^ ]*/)?nvidia-cuda-mps-server' >/dev/null 2>&1 && mps_foreign=1 || mps_foreign=0

work=$(mktemp -d "${TMPDIR:-/tmp}/cuslice-spatial.XXXXXX")
sched="" mps_dir="" pids=() runno=0 failures=0
mkdir -p "$OUT"
log=$OUT/spatial.log
results=$OUT/spatial-results.jsonl
: >"$results"
. "$here/backends.sh"
trap 'cleanup' EXIT
trap 'exit 130' INT TERM

echo "# $(nvidia-smi -i 0 --query-gpu=name,driver_version --format=csv,noheader); $(cuslice_version "$tree");" \
  "$rounds rounds of ${MEASURE_S} s windows$([ $quick = 1 ] && echo ', --quick')" | tee "$log"

services() { # services MODEL BATCH SECONDS ROLE...: one service per role, in the tenant of its name
  local m=$1 b=$2 s=$3 role; shift 3
  for role in "$@"; do worker "$role" "$role" -- "$py" "$here/service.py" "$m" "$b" "$s"; done
}

scenario_a() { # MODEL ROUND
  local m=$1 r=$2 cfg
  begin_run a "$m" alone "$r" 1 && services "$m" 1 "$MEASURE_S" alone
  end_run
  for cfg in native mps cuslice-timesliced cuslice-spatial cuslice-in-mps; do
    begin_run a "$m" "$cfg" "$r" 4 "$(yaml "$cfg" '{name: s1, memory: 8GiB}' '{name: s2, memory: 8GiB}' \
      '{name: s3, memory: 8GiB}' '{name: s4, memory: 8GiB}')" && services "$m" 1 "$MEASURE_S" s1 s2 s3 s4
    end_run
  done
}

scenario_b() { # ROUND
  local cfg g pct
  for cfg in native mps cuslice-spatial; do
    begin_run b sm-limits "$cfg" "$1" 3 "$(yaml "$cfg" '{name: g1, memory: 8GiB, compute: {sm: 50%}}' \
      '{name: g2, memory: 8GiB, compute: {sm: 25%}}' '{name: g3, memory: 8GiB, compute: {sm: 25%}}')" || { end_run; continue; }
    for g in g1:50 g2:25 g3:25; do
      pct=()
      [ "$cfg" = mps ] && pct=(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="${g#*:}")
      worker "${g%%:*}" "${g%%:*}" "${pct[@]+"${pct[@]}"}" -- "$py" "$here/gemm.py" "$MEASURE_S"
    done
    end_run
  done
}

scenario_c() { # ROUND
  local cfg l prio
  begin_run c priority alone "$1" 1 && services resnet50 8 "$MEASURE_S" hi
  end_run
  # cuslice-spatial-sm: the low services also bound to 30% of the SMs each, room left for the high one.
  for cfg in mps mps-prio cuslice-spatial cuslice-spatial-sm; do
    local low='priority: low'
    [ "$cfg" = cuslice-spatial-sm ] && low='priority: low, compute: {sm: 30%}'
    begin_run c priority "$cfg" "$1" 4 "$(yaml "$cfg" '{name: hi, memory: 8GiB, priority: high}' \
      "{name: l1, memory: 8GiB, $low}" "{name: l2, memory: 8GiB, $low}" \
      "{name: l3, memory: 8GiB, $low}")" || { end_run; continue; }
    services resnet50 8 "$MEASURE_S" hi
    prio=()
    [ "$cfg" = mps-prio ] && prio=(CUDA_MPS_CLIENT_PRIORITY=1)
    for l in l1 l2 l3; do worker "$l" "$l" "${prio[@]+"${prio[@]}"}" -- "$py" "$here/service.py" resnet50 1 "$MEASURE_S"; done
    end_run
  done
}

scenario_d() { # ROUND
  begin_run d trainer cuslice-spatial "$1" 3 "$(yaml cuslice-spatial '{name: s1, memory: 8GiB, compute: {share: 25%}}' \
    '{name: s2, memory: 8GiB, compute: {share: 25%}}' \
    '{name: trainer, memory: 8GiB, spatial: false, compute: {share: 50%}}')" || { end_run; return; }
  services resnet50 1 "$MEASURE_S" s1 s2
  worker trainer trainer -- "$py" "$here/gemm.py" "$MEASURE_S"
  if wait_go; then
    sleep 1; status_snapshot 0
    sleep $((MEASURE_S - 2)); status_snapshot 1
  fi
  end_run
}

scenario_e() { # ROUND
  begin_run e memory cuslice-spatial "$1" 4 "$(yaml cuslice-spatial '{name: s1, memory: 4GiB}' '{name: s2, memory: 4GiB}' \
    '{name: s3, memory: 4GiB}' '{name: s4, memory: 4GiB}' '{name: over, memory: 2GiB}')" || { end_run; return; }
  echo '{"s1": 4096, "s2": 4096, "s3": 4096, "s4": 4096, "over": 2048}' >"$rundir/quotas.json"
  services resnet50 1 "$MEASURE_S" s1 s2 s3 s4
  if wait_go; then
    sleep $((MEASURE_S / 2))
    nvidia-smi -i 0 --query-compute-apps=pid,used_memory,process_name --format=csv,noheader,nounits >"$rundir/smi.csv" 2>&1
    worker over over -- "$py" "$here/overquota.py" 3
  fi
  end_run
}

scenario_f() { # ROUND
  local cfg
  for cfg in native mps cuslice-spatial; do
    begin_run f fault "$cfg" "$1" 4 "$(yaml "$cfg" '{name: s1, memory: 8GiB}' '{name: s2, memory: 8GiB}' \
      '{name: s3, memory: 8GiB}' '{name: bad, memory: 8GiB}' '{name: late, memory: 8GiB}')" || { end_run; continue; }
    services resnet50 1 "$MEASURE_S" s1 s2 s3
    worker bad bad -- "$py" "$here/fault.py" $((MEASURE_S / 2))
    wait_workers
    new_barrier 1
    services resnet50 1 2 late
    end_run
  done
}

# SCENARIOS: the scenarios to run (letters), e.g. SCENARIOS=cd; default all, or a and b with --quick.
scenarios=${SCENARIOS:-$([ $quick = 1 ] && echo ab || echo abcdef)}
for r in $(seq 1 "$rounds"); do
  echo "== round $r"
  [[ $scenarios == *a* ]] && scenario_a resnet50 "$r"
  [[ $scenarios == *a* && $quick = 0 ]] && scenario_a encoder "$r"
  [[ $scenarios == *b* ]] && scenario_b "$r"
  [[ $scenarios == *c* ]] && scenario_c "$r"
  [[ $scenarios == *d* ]] && scenario_d "$r"
  [[ $scenarios == *e* ]] && scenario_e "$r"
  [[ $scenarios == *f* ]] && scenario_f "$r"
done

find "$work/runs" -name '*.sock' -delete 2>/dev/null
rm -rf "$OUT/spatial-runs" && cp -r "$work/runs" "$OUT/spatial-runs"
"$py" "$here/summarize.py" report "$results" >>"$log"
status=$?
echo
cat "$log"
echo "(every worker's line: $results; each run's logs: $OUT/spatial-runs/)"
((failures == 0)) || { echo "$failures run(s) failed: see the FAILED files under $OUT/spatial-runs/"; exit 1; }
exit $status
