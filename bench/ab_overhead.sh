#!/usr/bin/env bash
# Launch overhead of two versions of cuslice, alternated in one call (bench/run.sh, each with
# its own native runs): A, B, A, B ... so that the host's drift between calls does not pass
# for a difference.
#
#   bash bench/ab_overhead.sh A B [PAIRS] [ROUNDS]    # defaults 2 pairs, 3 rounds
#
# A and B: release tarballs, unpacked tarballs or build folders (scripts/cuslice-tree.sh).
# Writes $OUT/ab.md: per run, the version, run.sh's table, and the hook's exit counters of the
# "below" runs (monitor passes, records, queries, launches held back, gates).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/cuslice-tree.sh"
OUT=${OUT:-/tmp/ab-overhead}
a=$(cuslice_tree "${1:?usage: ab_overhead.sh A B [PAIRS] [ROUNDS]}") || exit 2
b=$(cuslice_tree "${2:?usage: ab_overhead.sh A B [PAIRS] [ROUNDS]}") || exit 2
pairs=${3:-2}
rounds=${4:-3}
mkdir -p "$OUT"
: >"$OUT/ab.md"
for p in $(seq 1 "$pairs"); do
  for side in A B; do
    if [ "$side" = A ]; then tree=$a; else tree=$b; fi
    run_out=$OUT/run-$p-$side
    mkdir -p "$run_out"
    OUT=$run_out CUSLICE_LOG_LEVEL=debug bash "$here/run.sh" --cuslice "$tree" "$rounds" >/dev/null 2>&1
    {
      echo "## pair $p, $side: $(cuslice_version "$tree")"
      cat "$run_out/bench.md"
      echo
      echo "exit counters of the runs below the idle high-priority tenant:"
      awk '/^RUN/ {cfg=$4} /at exit:/ && cfg=="below" {sub(/.*at exit: /, ""); print "- " $0}' "$run_out/bench.log"
      echo
    } >>"$OUT/ab.md"
  done
done
