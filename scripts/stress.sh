#!/usr/bin/env bash
# The zero-drop tests on a starved machine: ROUNDS rounds (default 3), each
# running the race-built integration tests that match RUN (default
# TestHandoffsUnderLoad) in two processes at once beside a busy loop per
# core, so that clients and workers wait for the CPU as they do on a
# loaded CI machine. It found a drain that closed connections idle
# 50-100 ms (docs/design.md, "What an idle connection costs"), which a
# plain `make test` showed about once in eight runs. Every process it
# starts is bounded in time and stopped by PID. Exits 1 if a run failed;
# the logs stay in .cache/stress/.
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
run=${RUN:-TestHandoffsUnderLoad}
out=.cache/stress
mkdir -p "$out"
go test -race -c -o "$out/integration.test" ./integration/ || exit 1
failed=0
hogs=()
tests=()
# However the script ends (a failed wait, ^C, a kill), what it started ends with it.
trap 'kill "${hogs[@]}" "${tests[@]}" 2>/dev/null' EXIT
for r in $(seq 1 "$rounds"); do
  hogs=()
  for _ in $(seq 1 "$(nproc)"); do
    timeout 900 sh -c 'while :; do :; done' &
    hogs+=($!)
  done
  tests=()
  for k in 1 2; do
    (cd integration && timeout 840 "../$out/integration.test" -test.v -test.count=1 -test.run "$run" >"../$out/round$r-$k.log" 2>&1) &
    tests+=($!)
  done
  for k in 1 2; do
    if wait "${tests[$((k-1))]}"; then
      echo "round $r/$k: ok"
    else
      echo "round $r/$k: FAILED ($out/round$r-$k.log)"
      grep -E "failures across|^\s+--- FAIL" "$out/round$r-$k.log" | cut -c1-400
      failed=1
    fi
  done
  kill "${hogs[@]}" 2>/dev/null
  wait "${hogs[@]}" 2>/dev/null
done
exit $failed
