#!/usr/bin/env bash
# Launch overhead of two bundles, alternated in one call (bench/run.sh, each with its own native
# runs): A, B, A, B ... so that the host's drift between calls does not pass for a difference.
#
#   bash bench/ab_overhead.sh BUNDLE_A BUNDLE_B [PAIRS] [ROUNDS]    # defaults 2 pairs, 3 rounds
#
# Writes $OUT/ab.md: per run, the bundle's commit, run.sh's table, and the hook's exit counters
# of the "below" runs (monitor passes, records, queries, launches held back, gates).
set -u
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/ab-overhead}
a=$(cd "$1" && pwd)
b=$(cd "$2" && pwd)
pairs=${3:-2}
rounds=${4:-3}
mkdir -p "$OUT"
: >"$OUT/ab.md"
for p in $(seq 1 "$pairs"); do
  for bundle in "$a" "$b"; do
    name=$(sed -n 's/^commit: //p' "$bundle/BUNDLE_INFO" | cut -d' ' -f1)
    run_out=$OUT/run-$p-$(basename "$bundle")
    mkdir -p "$run_out"
    OUT=$run_out CUSLICE_LOG_LEVEL=debug CUSLICE_HOOK=$bundle/lib/libcuslice.so CUSLICE_BUNDLE=$bundle \
      bash "$here/run.sh" "$rounds" >/dev/null 2>&1
    {
      echo "## pair $p, $(basename "$bundle") ($name)"
      cat "$run_out/bench.md"
      echo
      echo "exit counters of the runs below the idle high-priority tenant:"
      awk '/^RUN/ {cfg=$4} /at exit:/ && cfg=="below" {sub(/.*at exit: /, ""); print "- " $0}' "$run_out/bench.log"
      echo
    } >>"$OUT/ab.md"
  done
done
