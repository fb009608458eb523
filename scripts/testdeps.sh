#!/usr/bin/env bash
# The programs the tests run beside baton, installed from Debian's
# packages when missing: HAProxy (a real PROXY protocol sender), ip and
# unshare (the network and PID namespaces of the Kubernetes and upgrade
# tests), and Chromium (the status page's test loads it in a real
# browser, headless).
set -euo pipefail
need=()
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || need+=(haproxy)
command -v ip >/dev/null || need+=(iproute2)
command -v unshare >/dev/null || need+=(util-linux)
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || need+=(chromium)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "testdeps: need ${need[*]} (apt-get install as root)" >&2
  exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# The package starts its service; the tests run their own.
service haproxy stop >/dev/null 2>&1 || true
