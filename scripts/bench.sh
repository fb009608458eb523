#!/usr/bin/env bash
# `make bench`: install the peers (Debian's nginx, HAProxy, wrk) when
# missing, build baton and the load tools, and run the side-by-side
# benchmark, which writes docs/benchmarks.md and docs/benchmarks.json.
# BENCH_QUICK=1 runs a short version.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
[ -x /usr/sbin/nginx ] || need+=(nginx)
[ -f /usr/lib/nginx/modules/ngx_stream_module.so ] || need+=(libnginx-mod-stream)
[ -x /usr/sbin/haproxy ] || need+=(haproxy)
command -v wrk >/dev/null || need+=(wrk)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "bench: need ${need[*]} (apt-get install as root)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # The packages start their services; the benchmark runs its own.
  systemctl stop nginx haproxy 2>/dev/null || service nginx stop 2>/dev/null || true
  service haproxy stop 2>/dev/null || true
fi
CGO_ENABLED=0 go build -tags urfave_cli_no_docs -o bin/baton ./cmd/baton  # as make build
# As make build OPENSSL=1, for the full RSA row (needs gcc; skipped without).
CGO_ENABLED=1 go build -tags urfave_cli_no_docs,openssl -o bin/baton-openssl ./cmd/baton ||
  { echo "bench: no OpenSSL build of baton (gcc?): the RSA row has the default build only" >&2; rm -f bin/baton-openssl; }
go build -o bin/loadgen ./integration/cmd/loadgen
go run ./integration/cmd/bench -bin bin -out docs/benchmarks.md -json docs/benchmarks.json
