#!/usr/bin/env bash
# `make bench`: install the peers (Debian's nginx, HAProxy, wrk) when
# missing (scripts/peers.sh), Caddy from the Go module proxy (scripts/caddybin.sh),
# build baton and the load tools, and run the
# side-by-side benchmark, which writes docs/benchmarks.md and docs/benchmarks.json.
# BENCH_QUICK=1 runs a short version.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/peers.sh
./scripts/caddybin.sh  # Caddy, the Go peer, into .cache/caddybin (once)
CGO_ENABLED=0 go build -tags urfave_cli_no_docs -o bin/baton ./cmd/baton  # as make build
# As make build OPENSSL=1, for the full RSA row (needs gcc; skipped without).
CGO_ENABLED=1 go build -tags urfave_cli_no_docs,openssl -o bin/baton-openssl ./cmd/baton ||
  { echo "bench: no OpenSSL build of baton (gcc?): the RSA row has the default build only" >&2; rm -f bin/baton-openssl; }
go build -o bin/loadgen ./integration/cmd/loadgen
go run ./integration/cmd/bench -bin bin -out docs/benchmarks.md -json docs/benchmarks.json
./scripts/grpcbench.sh  # section 7, gRPC beside nginx's grpc_pass and HAProxy
