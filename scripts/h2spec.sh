#!/usr/bin/env bash
# Builds h2spec, the HTTP/2 conformance suite the integration tests run
# against baton (integration/h2spec pins it), into .cache/tools, once.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$PWD/.cache/tools/h2spec"
version=$(awk '/summerwind\/h2spec /{print $2}' integration/h2spec/go.mod)
if [ -x "$out" ] && [ "$(cat "$out.version" 2>/dev/null)" = "$version" ]; then
  exit 0
fi
mkdir -p "$(dirname "$out")"
cd integration/h2spec
go build -trimpath -o "$out" github.com/summerwind/h2spec/cmd/h2spec
echo "$version" > "$out.version"
