#!/usr/bin/env bash
# Instructions per call the hook adds (callgrind, fake driver). Each run makes N calls of a
# path inside path_cost_counted(), which callgrind dumps on entering and on leaving, one file
# per thread: the launching thread's dump in between holds exactly those calls. From runs of
# N1 and N2 calls, (I(N2) - I(N1)) / (N2 - N1) cancels what a run does once (the first call,
# a token taken back while it paused); configuration minus native is what the hook adds.
#
# Configurations (as bench/run.sh's): native; hooked (no scheduler); and, for cuLaunchKernel,
# under a cuslice-scheduler this script starts on a socket and segment of its own:
# scheduled (the process alone in a tenant of its own) and below (in a low-priority tenant
# while an idle process of a high-priority tenant is registered). Under the scheduler the
# hook's monitor thread runs beside the launching thread: its instructions per launch (whole
# runs, N2 minus N1) are reported apart; they follow time, not launches (it looks every so
# many microseconds), and valgrind runs the program many times slower and one thread at a
# time, so they vary from run to run and do not carry over to a GPU.
# Then the launch path of each configuration by function (breakdown.py).
#
#   bash bench/path_cost/run.sh [BUILD_DIR]     (default: build; needs valgrind and python3)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-build}" && pwd)
bin=$build/bench/path_cost/path_cost
hook=$build/hook/libcuslice.so
fake=$build/fake_driver
scheduler=$build/scheduler/cuslice-scheduler
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)"; exit 2; }
for f in "$bin" "$hook" "$scheduler" "$fake/libcuda.so.1"; do
  [ -e "$f" ] || { echo "$f is missing: cmake --build $build --target path_cost"; exit 2; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cuslice-path-cost.XXXXXX")
shm=/cuslice-path-cost-$$
sock=$tmp/run/cuslice.sock
daemon="" idle_hi=""
cleanup() {
  for p in $idle_hi $daemon; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -f "/dev/shm$shm"
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# count CONFIG MODE N: runs path_cost under callgrind; its dumps go to $tmp/CONFIG-MODE-N.*
# Sets main (the launching thread's instructions inside path_cost_counted()) and others (the
# hook's other threads': its monitor and watchdog, over the whole run).
count() {
  local out=$tmp/$1-$2-$3 env=(LD_LIBRARY_PATH="$fake")
  case $1 in
    native) ;;
    hooked) env+=(LD_PRELOAD="$hook" CUSLICE_MEMORY_LIMIT=8GiB CUSLICE_SOCKET="$tmp/none.sock") ;;
    scheduled) env+=(LD_PRELOAD="$hook" CUSLICE_SOCKET="$sock" CUSLICE_TENANT=solo) ;;
    below) env+=(LD_PRELOAD="$hook" CUSLICE_SOCKET="$sock" CUSLICE_TENANT=lo) ;;
  esac
  env "${env[@]}" valgrind --tool=callgrind --separate-threads=yes \
    --dump-before=path_cost_counted --dump-after=path_cost_counted \
    --callgrind-out-file="$out" -q "$bin" "$2" "$3" >"$out.log" 2>&1 \
    || { echo "path_cost $2 $3 ($1) failed:" >&2; cat "$out.log" >&2; exit 1; }
  local f
  main=$(awk '/^summary:/ {print $2}' "$out.2-01")
  others=0
  for f in "$out"-*; do  # the hook's threads; not the fake driver's own (it has one)
    if [ "$f" != "$out-01" ] && grep -q 'cuslice::activity::.*\(monitor_main\|watchdog\)' "$f"; then
      others=$((others + $(awk '/^summary:/ {print $2}' "$f")))
    fi
  done
}
per_call() { echo $(( ($2 - $1) / (n2 - n1) )); }  # I(N1) I(N2)

n1=2000; n2=12000
declare -A main_cost monitor_cost
measure() {  # CONFIG MODE
  local main1 others1
  count "$1" "$2" $n1
  main1=$main others1=$others
  count "$1" "$2" $n2
  main_cost[$1-$2]=$(per_call "$main1" "$main")
  monitor_cost[$1-$2]=$(per_call "$others1" "$others")
}

for mode in launch alloc async; do
  measure native $mode
  measure hooked $mode
done

# The scheduler, with its tenants (its log: $tmp/scheduler.log).
mkdir -p "$tmp/run"
printf 'tenants:\n  - {name: solo}\n  - {name: hi, priority: high}\n  - {name: lo, priority: low}\n' >"$tmp/cuslice.yaml"
"$scheduler" --config "$tmp/cuslice.yaml" --socket "$sock" --control-socket "$tmp/control.sock" \
  --shm-name "$shm" --log-level info >"$tmp/scheduler.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do [ -S "$sock" ] && [ -e "/dev/shm$shm" ] && break; sleep 0.05; done
[ -S "$sock" ] && [ -e "/dev/shm$shm" ] || { echo "the scheduler did not start:"; cat "$tmp/scheduler.log"; exit 1; }

measure scheduled launch
measure scheduled async
# An idle, registered process of the high-priority tenant (cuInit registers it).
env LD_LIBRARY_PATH="$fake" LD_PRELOAD="$hook" CUSLICE_SOCKET="$sock" CUSLICE_TENANT=hi \
  "$bin" idle >"$tmp/idle.log" 2>&1 &
idle_hi=$!
for _ in $(seq 100); do grep -q "joined tenant hi" "$tmp/scheduler.log" && break; sleep 0.05; done
grep -q "joined tenant hi" "$tmp/scheduler.log" || { echo "the idle process did not register:"; cat "$tmp/idle.log" "$tmp/scheduler.log"; exit 1; }
measure below launch

# What is counted is what is meant: the hook's launch path ran, and under the scheduler the
# path of each configuration (the token's, or parking below the high-priority tenant).
expect() {  # CONFIG FUNCTION
  grep -q "$2" "$tmp/$1-launch-$n2.2-01" || { echo "$1: the launches never reached $2" >&2; exit 1; }
}
expect hooked 'libcuslice.so'
expect scheduled 'cuslice::client::token_acquire'
expect below 'cuslice::activity::park_on_stream'

echo "| path | native instructions/call | with the hook | added by the hook | monitor thread, per call |"
echo "|---|---|---|---|---|"
row() {  # LABEL CONFIG MODE
  local native=${main_cost[native-$3]} with=${main_cost[$2-$3]} monitor="–"
  if [ "$2" = scheduled ] || [ "$2" = below ]; then monitor=${monitor_cost[$2-$3]}; fi
  echo "| $1 | $native | $with | $(( with - native )) | $monitor |"
}
row '`cuLaunchKernel`, hooked (no scheduler)' hooked launch
row '`cuLaunchKernel`, scheduled (alone in its tenant)' scheduled launch
row '`cuLaunchKernel`, below (a high-priority tenant registered)' below launch
row '`cuMemAlloc` + `cuMemFree`, 2 MiB, hooked' hooked alloc
row '`cuMemAllocAsync` + `cuMemFreeAsync`, 2 MiB, hooked' hooked async
row '`cuMemAllocAsync` + `cuMemFreeAsync`, 2 MiB, scheduled' scheduled async

monitor_of() {  # DUMP_PREFIX: the dump of the hook's monitor thread, if it ran one
  grep -l 'cuslice::activity::monitor_main' "$1"-* 2>/dev/null | head -n 1 || true
}
for config in hooked scheduled below; do
  echo
  echo "### $config: the launching thread's instructions per cuLaunchKernel, by function"
  echo
  a=$tmp/$config-launch-$n1 b=$tmp/$config-launch-$n2
  monitor=()
  ma=$(monitor_of "$a") mb=$(monitor_of "$b")
  [ -n "$ma" ] && [ -n "$mb" ] && monitor=(--pass "$ma" "$mb")
  python3 "$here/breakdown.py" "$a.2-01" "$b.2-01" $n1 $n2 "${monitor[@]}"
done
for config in hooked scheduled; do
  echo
  echo "### $config: the launching thread's instructions per cuMemAllocAsync + cuMemFreeAsync pair, by function"
  echo
  python3 "$here/breakdown.py" "$tmp/$config-async-$n1.2-01" "$tmp/$config-async-$n2.2-01" $n1 $n2
done
