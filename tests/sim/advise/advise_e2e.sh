#!/usr/bin/env bash
# `hetsim advise` end to end: with --no-prune, one process, --jobs 2 and `mpirun -np 2` give byte-identical
# tables and results; with pruning (rounds of one pair per worker, so which pairs are pruned depends on the
# workers) they give the same recommendation and the same Pareto front; and a run resumed after half of its
# replays were deleted recomputes them and gives the same table.
# Usage: advise_e2e.sh HETSIM
set -euo pipefail
hetsim=$(realpath "$1")
cfg="$(cd "$(dirname "$0")/../../data/advise" && pwd)/small.yaml"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$hetsim" advise "$cfg" -o "$out/one" --no-prune --no-figures -q > "$out/one.txt"
"$hetsim" advise "$cfg" -o "$out/jobs" --no-prune --jobs 2 --no-figures -q > /dev/null
mpirun --oversubscribe -np 2 "$hetsim" advise "$cfg" -o "$out/mpi" --no-prune --no-figures -q > /dev/null
for f in configurations.csv results.csv results.jsonl advice.json recommendation.md; do
  cmp "$out/one/$f" "$out/jobs/$f" || { echo "FAIL: --jobs 2 changed $f"; exit 1; }
  cmp "$out/one/$f" "$out/mpi/$f" || { echo "FAIL: mpirun -np 2 changed $f"; exit 1; }
done
# Pruned, by one process and by two ranks: the configurations on the front and the recommended one.
front() { awk -F, 'NR > 1 && ($(NF - 2) == 1 || $NF == 1) { print $1, $(NF - 2), $NF }' "$1/configurations.csv"; }
"$hetsim" advise "$cfg" -o "$out/p1" --no-figures -q > /dev/null
mpirun --oversubscribe -np 2 "$hetsim" advise "$cfg" -o "$out/p2" --no-figures -q > /dev/null
[ "$(front "$out/p1")" = "$(front "$out/one")" ] || { echo "FAIL: pruning changed the front or the recommendation"; exit 1; }
[ "$(front "$out/p2")" = "$(front "$out/one")" ] || { echo "FAIL: pruning over two ranks changed the front"; exit 1; }
grep -q ',pruned,' "$out/p1/configurations.csv" || { echo "FAIL: nothing was pruned"; exit 1; }
# Resume: delete every other replay, then --resume recomputes those and nothing changes.
n=$(ls "$out/one/points" | wc -l)
ls "$out/one/points" | awk 'NR % 2 == 0' | while read -r f; do rm "$out/one/points/$f"; done
cp "$out/one/configurations.csv" "$out/before.csv"
"$hetsim" advise "$cfg" -o "$out/one" --resume --no-prune --no-figures -q > /dev/null
cmp "$out/before.csv" "$out/one/configurations.csv" || { echo "FAIL: --resume changed the table"; exit 1; }
[ "$(ls "$out/one/points" | wc -l)" -eq "$n" ] || { echo "FAIL: --resume left replays missing"; exit 1; }
grep -q "recommended" "$out/one.txt" || { echo "FAIL: no recommendation printed"; exit 1; }
echo "OK: one process, --jobs 2, mpirun -np 2 and --resume agree ($n replays)"
