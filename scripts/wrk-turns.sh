#!/usr/bin/env bash
# wrk-turns.sh ROUNDS SECONDS PORT...: a quick A/B of proxies already
# running on 127.0.0.1: each round, wrk (-t2 -c32) on each port in turn for
# SECONDS; then each port's req/s over all its turns. Taking turns, the
# targets share the machine's good and bad moments alike (make bench does
# the same, at length).
#   scripts/wrk-turns.sh 10 2 18080 28080
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 ROUNDS SECONDS PORT..." >&2; exit 2; }
rounds=$1 secs=$2
shift 2
declare -A total
for _ in $(seq "$rounds"); do
  for port in "$@"; do
    n=$(wrk -t2 -c32 -d"${secs}s" "http://127.0.0.1:$port/" | awk '/requests in/{print $1}')
    total[$port]=$(( ${total[$port]:-0} + n ))
  done
  set -- "${@:2}" "$1" # the next round starts with the next port
done
for port in "${!total[@]}"; do
  echo "$port $(( ${total[$port]} / (rounds * secs) )) req/s"
done | sort
