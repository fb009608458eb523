#!/usr/bin/env bash
# Builds Caddy (integration/caddybin pins its version), the Go peer of
# make bench, from the Go module proxy into .cache/caddybin, once: a
# minute or two cold, nothing after.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$PWD/.cache/caddybin"
version=$(awk '/caddyserver\/caddy\/v2 /{print $2; exit}' integration/caddybin/go.mod)
if [ -x "$out/caddy" ] && [ "$(cat "$out/version" 2>/dev/null)" = "$version" ]; then
  exit 0
fi
mkdir -p "$out"
echo "caddybin: building Caddy $version (once)" >&2
(cd integration/caddybin && CGO_ENABLED=0 go build -trimpath -o "$out/caddy" .)
echo "$version" > "$out/version"
