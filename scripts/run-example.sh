#!/usr/bin/env bash
# Runs baton's main job on this machine: the example backend in the
# background and the supervisor in the foreground with examples/baton.yaml.
# ^C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
bin/backend -http 127.0.0.1:9000 -tcp 127.0.0.1:9001 -name example &
backend=$!
trap 'kill "$backend" 2>/dev/null; wait "$backend" 2>/dev/null || true' EXIT
cat <<MSG
baton is starting with examples/baton.yaml. In another terminal:
  curl -i http://127.0.0.1:8080/        # through baton to the example backend
  bin/baton status --watch              # generations, workers, handoffs, the timeline
  open http://127.0.0.1:9101/           # the status page
  kill -HUP \$(pgrep -f 'baton run')    # or: bin/baton reload
MSG
bin/baton run --config examples/baton.yaml
