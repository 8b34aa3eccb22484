#!/usr/bin/env bash
# Instructions per call the hook adds (callgrind, fake driver): for each path, the count of
# N1 and N2 calls, native and hooked; (I(N2) - I(N1)) / (N2 - N1) cancels start-up, and the
# hooked minus native difference is the hook's cost per call.
#   bash bench/path_cost/run.sh [BUILD_DIR]     (default: build; needs valgrind)
set -euo pipefail
build=${1:-build}
bin=$build/bench/path_cost/path_cost
hook=$build/hook/libcuslice.so
fake=$build/fake_driver
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)"; exit 2; }
count() {  # mode, n, hooked?
  local out; out=$(mktemp)
  if [ "$3" = 1 ]; then
    env LD_LIBRARY_PATH="$fake" CUSLICE_MEMORY_LIMIT=8GiB LD_PRELOAD="$hook" \
      valgrind --tool=callgrind --callgrind-out-file="$out" -q "$bin" "$1" "$2" >/dev/null 2>&1 || true
  else
    env LD_LIBRARY_PATH="$fake" valgrind --tool=callgrind --callgrind-out-file="$out" -q "$bin" "$1" "$2" >/dev/null 2>&1 || true
  fi
  grep -m1 '^summary:' "$out" | awk '{print $2}'
  rm -f "$out"
}
n1=2000; n2=12000
echo "| path | native instructions/call | hooked instructions/call | added by the hook |"
echo "|---|---|---|---|"
for mode in launch alloc async; do
  a1=$(count $mode $n1 0); a2=$(count $mode $n2 0)
  b1=$(count $mode $n1 1); b2=$(count $mode $n2 1)
  native=$(( (a2 - a1) / (n2 - n1) )); hooked=$(( (b2 - b1) / (n2 - n1) ))
  echo "| $mode | $native | $hooked | $(( hooked - native )) |"
done
