#!/usr/bin/env bash
# make fuzz: run each fuzzer (PKG:NAME) for FUZZTIME; what they find is
# written to the package's testdata/fuzz and replayed by every go test.
# New inputs are minimised for at most 2 s (the default minute stalls a
# fuzzer whose inputs grow fast).
#
# Go 1.26's fuzzing coordinator can fail a run that found nothing with a
# bare "context deadline exceeded" as -fuzztime ends (go.dev/issue/75804,
# fixed in Go 1.27): such a run, which wrote no input, is reported and
# not counted as a finding. Any other failure, or a new input, fails.
set -uo pipefail
cd "$(dirname "$0")/.."
fuzztime=$1
shift
for f in "$@"; do
  pkg=${f%%:*} name=${f#*:}
  echo "fuzz $name ($pkg) for $fuzztime"
  dir="$pkg/testdata/fuzz/$name"
  before=$(ls "$dir" 2>/dev/null)
  out=$(mktemp)
  go test -run '^$' -fuzz "^$name\$" -fuzztime "$fuzztime" -fuzzminimizetime 2s -timeout 0 "$pkg" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  after=$(ls "$dir" 2>/dev/null)
  if [ "$rc" -ne 0 ]; then
    if [ "$before" = "$after" ] && grep -qxE '[[:space:]]*context deadline exceeded' "$out"; then
      echo "fuzz $name: stopped by Go's coordinator race at the end of -fuzztime (go.dev/issue/75804); no input written, not a finding"
    else
      rm -f "$out"
      exit 1
    fi
  fi
  rm -f "$out"
done
