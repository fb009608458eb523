#!/usr/bin/env bash
# `make attacks`: the HTTP/2 and slow-client attacks of docs/security.md
# ("Attacks, measured"), each against a fresh baton and a fresh nginx with
# their defaults, in front of the same backend; writes the table into
# docs/security.md. About 4 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/peers.sh
CGO_ENABLED=0 go build -tags urfave_cli_no_docs -o bin/baton ./cmd/baton  # as make build
go run ./integration/cmd/bench -bin bin -targets baton,nginx -attacks docs/security.md
