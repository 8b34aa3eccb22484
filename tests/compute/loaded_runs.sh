#!/usr/bin/env bash
# The timing scenarios (ctest label `timing`) on a loaded machine: N consecutive runs of them
# while C++ compiles run beside on every core, as on a developer's machine that builds while
# it tests. Prints each run's result and each scenario's measurement line (with the box's
# lateness), and exits 1 at the first run that fails.
#
#   bash tests/compute/loaded_runs.sh [BUILD [N]]      # BUILD default build, N default 10
set -uo pipefail
build=${1:-build}
runs=${2:-10}
[ -f "$build/CTestTestfile.cmake" ] || { echo "no ctest tree in $build"; exit 2; }
load_pids=()
stop_load() { kill "${load_pids[@]}" 2>/dev/null; wait 2>/dev/null; }
trap stop_load EXIT
unit='#include <regex>
#include <map>
#include <string>
int main(int c, char** v) { std::map<std::string, std::regex> m; m.emplace(v[0], std::regex("(a|b)+c*")); return c; }'
for _ in $(seq "$(nproc)"); do
  (while :; do printf '%s\n' "$unit" | g++ -O2 -std=c++20 -x c++ - -o /dev/null; done) &
  load_pids+=($!)
done
for i in $(seq "$runs"); do
  log=$(mktemp)
  ctest --test-dir "$build" -L timing -V >"$log" 2>&1
  rc=$?
  echo "run $i of $runs: $(grep -E 'tests passed' "$log") (load average $(cut -d' ' -f1 /proc/loadavg))"
  grep -E '^[0-9]+: (70/30|50/30/20|limit|priority|mixed|bursts|longest|batch|attempt)' "$log" | sed 's/^[0-9]*: /    /'
  if [ $rc -ne 0 ]; then
    grep -E "Failed|^[0-9]+: E " "$log" | head -20
    echo "log: $log"
    exit 1
  fi
  rm -f "$log"
done
