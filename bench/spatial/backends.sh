# The runs of the spatial benchmark (sourced by bench/spatial/run.sh, which sets here, tree, py,
# work, mps_control, mps_foreign, MEASURE_S, results, and sched, mps_dir, pids, runno,
# failures): what each configuration runs under (nothing, a private MPS daemon, or a
# cuslice-scheduler of its own), the workers' environment, the start barrier's folder, and the
# clean-up. Never changes a GPU setting; stops only the daemons and workers it started.
#
#   begin_run SCENARIO VARIANT CONFIG ROUND N [YAML] && worker ROLE TENANT [VAR=V...] -- CMD...
#   wait_go; wait_workers; new_barrier N; end_run
#
# CONFIG: alone or native (no hook), mps* (the private daemon), cuslice-* (a scheduler on YAML).

# yaml CONFIG TENANT...: the scheduler's configuration for a cuslice configuration, each
# TENANT a YAML flow mapping; nothing for the others.
yaml() {
  local cfg=$1; shift
  case $cfg in
    cuslice-spatial*)
      printf 'scheduler:\n  spatial:\n    gpus: all\n'
      [ -n "${MPS_CONTROL:-}" ] && printf '    mps_control: %s\n' "$MPS_CONTROL" ;;
    cuslice-*) ;;
    *) return 0 ;;
  esac
  printf 'tenants:\n'
  # Joined by name (CUSLICE_TENANT); `sm` only where tenants run side by side.
  local t
  for t in "$@"; do
    t=${t/\{name: /\{allow_env: true, name: }
    [[ $cfg == cuslice-spatial* ]] || t=$(sed -E 's/, compute: \{sm: [0-9]+%\}//; s/sm: [0-9]+%, ?//; s/, sm: [0-9]+%//' <<<"$t")
    printf '  - %s\n' "$t"
  done
}

mps_start() {
  [ -n "$mps_control" ] || { echo "no nvidia-cuda-mps-control on PATH (or set MPS_CONTROL)"; return 1; }
  mps_dir=$work/mps.$runno
  mkdir -p "$mps_dir/pipe" "$mps_dir/log"
  if ! CUDA_MPS_PIPE_DIRECTORY=$mps_dir/pipe CUDA_MPS_LOG_DIRECTORY=$mps_dir/log "$mps_control" -d; then
    echo "nvidia-cuda-mps-control -d failed:"; cat "$mps_dir/log/control.log" 2>/dev/null
    mps_dir=""
    return 1
  fi
}

mps_stop() {
  [ -n "$mps_dir" ] || return 0
  if ! echo quit | CUDA_MPS_PIPE_DIRECTORY=$mps_dir/pipe CUDA_MPS_LOG_DIRECTORY=$mps_dir/log \
    timeout 30 "$mps_control"; then
    echo "warning: the private MPS daemon ($mps_dir) did not take quit; see $mps_dir/log" >&2
  fi
  [ -n "${rundir:-}" ] && cp "$mps_dir"/log/*.log "$rundir/" 2>/dev/null
  mps_dir=""
}

sched_start() {
  "$tree/bin/cuslice-scheduler" --config "$rundir/cuslice.yaml" --socket "$rundir/cuslice.sock" \
    --shm-name "/cuslice-spatial-$$-$runno" >"$rundir/scheduler.log" 2>&1 &
  sched=$!
  for _ in $(seq 300); do
    [ -S "$rundir/cuslice.sock" ] && return 0
    kill -0 "$sched" 2>/dev/null || break
    sleep 0.1
  done
  echo "the scheduler did not start; its log, then its configuration:"
  cat "$rundir/scheduler.log" "$rundir/cuslice.yaml"
  kill "$sched" 2>/dev/null; wait "$sched" 2>/dev/null; sched=""
  return 1
}

sched_stop() {
  [ -n "$sched" ] || return 0
  kill "$sched" 2>/dev/null
  wait "$sched" 2>/dev/null
  sched=""
}

# The previous run's MPS server (ours or the scheduler's) must be gone before the next starts.
mps_server_gone() {
  [ "$mps_foreign" = 1 ] && return 0
  for _ in $(seq 60); do pgrep -f '^([^ ]*/)?nvidia-cuda-mps-server' >/dev/null 2>&1 || return 0; sleep 0.25; done
  echo "warning: an nvidia-cuda-mps-server is still running 15 s after its run" >&2
}

new_barrier() {
  sync_dir=$(mktemp -d "$rundir/sync.XXXX")
  n_sync=$1
}

# begin_run SCENARIO VARIANT CONFIG ROUND N [YAML]: a run's folder, its barrier of N workers,
# and what CONFIG runs under; 1 (with FAILED written) when that could not start.
begin_run() {
  run_tag=("$1" "$2" "$3" "$4")
  config=$3
  runno=$((runno + 1))
  rundir=$work/runs/$1-$2-$3-r$4
  mkdir -p "$rundir"
  new_barrier "$5"
  pids=()
  echo "-- $1) $2, $3, round $4"
  local why=$rundir/FAILED.tmp
  case $config in
    alone | native) ;;
    mps*) mps_start >"$why" 2>&1 || { mv "$why" "$rundir/FAILED"; cat "$rundir/FAILED"; return 1; } ;;
    cuslice-*)
      # cuslice-in-mps: time-sliced tenants whose processes are clients of an MPS daemon the
      # user started (the application's own), as a user who runs `cuslice run` inside MPS.
      if [ "$config" = cuslice-in-mps ]; then
        mps_start >"$why" 2>&1 || { mv "$why" "$rundir/FAILED"; cat "$rundir/FAILED"; return 1; }
      fi
      printf '%s\n' "$6" >"$rundir/cuslice.yaml"
      sched_start >"$why" 2>&1 || { mv "$why" "$rundir/FAILED"; cat "$rundir/FAILED"; return 1; } ;;
    *) echo "unknown configuration $config" >"$rundir/FAILED"; return 1 ;;
  esac
  rm -f "$why"
}

# worker ROLE TENANT [VAR=VALUE...] -- COMMAND...: one worker of the current run, in the
# background, its output in ROLE.out and ROLE.err.
worker() {
  local role=$1 tenant=$2 extra=()
  shift 2
  while [ "$1" != -- ]; do extra+=("$1"); shift; done
  shift
  local e=(env -u LD_PRELOAD -u CUDA_MPS_PIPE_DIRECTORY -u CUSLICE_SOCKET -u CUSLICE_TENANT
           -u CUDA_MPS_ACTIVE_THREAD_PERCENTAGE -u CUDA_MPS_CLIENT_PRIORITY
           SPATIAL_SYNC="$sync_dir" SPATIAL_N="$n_sync")
  case $config in
    mps*) e+=(CUDA_MPS_PIPE_DIRECTORY="$mps_dir/pipe") ;;
    cuslice-*) e+=(LD_PRELOAD="$tree/lib/libcuslice.so" CUSLICE_SOCKET="$rundir/cuslice.sock" CUSLICE_TENANT="$tenant")
      [ "$config" = cuslice-in-mps ] && e+=(CUDA_MPS_PIPE_DIRECTORY="$mps_dir/pipe") ;;
  esac
  "${e[@]}" "${extra[@]+"${extra[@]}"}" "$@" >"$rundir/$role.out" 2>"$rundir/$role.err" &
  pids+=($!)
}

# Waits until the workers published t0 (1 when they all ended or 300 s passed without it).
wait_go() {
  local deadline=$((SECONDS + 300)) p alive
  while [ ! -e "$sync_dir/go" ]; do
    alive=0
    for p in "${pids[@]+"${pids[@]}"}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    if [ $alive = 0 ] || ((SECONDS > deadline)); then
      echo "the workers never all became ready" >>"$rundir/FAILED"
      return 1
    fi
    sleep 0.2
  done
}

# Waits for the run's workers; those still running well past the window (60 s past it once
# they all started, a hung one after a fault among them) are killed.
wait_workers() {
  local deadline=$((SECONDS + MEASURE_S + 300)) tight=0 p
  for p in "${pids[@]+"${pids[@]}"}"; do
    while kill -0 "$p" 2>/dev/null && ((SECONDS < deadline)); do
      if [ $tight = 0 ] && [ -e "$sync_dir/go" ]; then
        tight=1
        ((SECONDS + MEASURE_S + 60 < deadline)) && deadline=$((SECONDS + MEASURE_S + 60))
      fi
      sleep 0.2
    done
    if kill -0 "$p" 2>/dev/null; then
      echo "worker $p ($(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null)) still running well past its window: killed" \
        >>"$rundir/FAILED"
      kill "$p"; sleep 3; kill -9 "$p" 2>/dev/null
    fi
    wait "$p" 2>/dev/null
  done
  pids=()
}

end_run() {
  wait_workers
  sched_stop
  mps_stop
  mps_server_gone
  [ -e "$rundir/FAILED" ] && failures=$((failures + 1))
  "$py" "$here/summarize.py" collect "$rundir" "${run_tag[@]}" >>"$results" ||
    echo "warning: could not read the results of $rundir" >&2
  local e
  e=$(grep -l '"error":"' "$rundir"/*.out 2>/dev/null | xargs -r -n1 basename | tr '\n' ' ')
  echo "   done${e:+; errors from: $e}"
}

# status_snapshot N: the time and `cuslice status --json` of the current run's scheduler.
status_snapshot() {
  local j t
  t=$(date +%s.%N)
  j=$("$tree/bin/cuslice" status --socket "$rundir/cuslice.sock" --json 2>"$rundir/status.$1.err")
  printf '{"t": %s, "status": %s}\n' "$t" "${j:-null}" >"$rundir/status.$1.json"
}

cleanup() {
  local p
  for p in "${pids[@]+"${pids[@]}"}"; do kill "$p" 2>/dev/null; done
  sched_stop
  mps_stop
  rm -rf "$work"
}
