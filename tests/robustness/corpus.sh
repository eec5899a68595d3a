#!/usr/bin/env bash
# Runs every case of cases.tsv: the command must exit with the given status and say the given text (on
# stderr or stdout), and must not crash (a signal) or leave INJECTED behind (the shell-name case).
# Usage: corpus.sh HETSIM
set -uo pipefail
hetsim=$(realpath "$1")
here="$(cd "$(dirname "$0")" && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/a-folder"
fails=0 n=0
while IFS=$'\t' read -r cmd want text; do
  [[ -z "$cmd" || "$cmd" == \#* ]] && continue
  n=$((n + 1))
  cmd=${cmd//\{corpus\}/$here/corpus}
  cmd=${cmd//\{tmp\}/$tmp}
  # shellcheck disable=SC2086
  (cd "$tmp" && timeout 60 "$hetsim" $cmd > "$tmp/out" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want" ] || ! grep -qF -- "$text" "$tmp/out"; then
    echo "FAIL: hetsim $cmd: exit $rc (want $want), output:"; sed 's/^/    /' "$tmp/out" | head -5
    echo "    (want the text: $text)"
    fails=$((fails + 1))
  fi
done < "$here/cases.tsv"
if [ -e "$tmp/INJECTED" ] || [ -e INJECTED ]; then echo "FAIL: a manifest name ran a shell command"; fails=$((fails + 1)); fi
echo "corpus.sh: $((n - fails)) of $n cases as expected"
[ "$fails" -eq 0 ]
