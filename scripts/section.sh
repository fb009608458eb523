#!/usr/bin/env bash
# section.sh FILE NAME BLOCK: put the text of file BLOCK (which begins and
# ends with NAME's markers) in FILE between the markers
# "<!-- NAME: begin ..." and "<!-- NAME: end -->", added at the end of FILE
# when missing. For the benchmark scripts that write their own section of
# docs/benchmarks.md.
set -euo pipefail
out=$1 name=$2 block=$3
begin=$(head -n 1 "$block")
end="<!-- $name: end -->"
touch "$out"
if ! grep -qF "$begin" "$out"; then
	printf '\n%s\n%s\n' "$begin" "$end" >> "$out"
fi
awk -v begin="$begin" -v end="$end" -v blockfile="$block" '
	$0 == begin { while ((getline line < blockfile) > 0) print line; skip = 1; next }
	$0 == end { skip = 0; next }
	!skip { print }
' "$out" > "$out.new"
mv "$out.new" "$out"
