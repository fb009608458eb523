#!/usr/bin/env bash
# The peers baton is measured beside: Debian's nginx (with its stream
# module), HAProxy and wrk, installed when missing (as root). Their
# packages start services; the benchmarks run their own.
set -euo pipefail
need=()
[ -x /usr/sbin/nginx ] || need+=(nginx)
[ -f /usr/lib/nginx/modules/ngx_stream_module.so ] || need+=(libnginx-mod-stream)
[ -x /usr/sbin/haproxy ] || need+=(haproxy)
command -v wrk >/dev/null || need+=(wrk)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "peers: need ${need[*]} (apt-get install as root)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  systemctl stop nginx haproxy 2>/dev/null || service nginx stop 2>/dev/null || true
  service haproxy stop 2>/dev/null || true
fi
