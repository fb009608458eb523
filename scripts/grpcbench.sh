#!/usr/bin/env bash
# Unary gRPC calls through baton (backend protocol h2c), nginx's grpc_pass
# and HAProxy (proto h2), to the same backend, interleaved: 3 rounds of
# 5 s each, 32 concurrent calls over 1 and over 32 connections; then 32
# long-lived bidirectional streams over 1 connection (messages/s); then,
# for each, 15 reloads 400 ms apart under unary load, and again under
# long-lived streams (each held for all 8 s, across every reload). make
# bench runs it; integration/cmd/grpcreport writes its section of
# docs/benchmarks.md (OUT: another file).
# Ports 24080 (baton), 24180 (nginx), 24280 (HAProxy), 24900 (backend).
set -euo pipefail
cd "$(dirname "$0")/.."
# A port another process holds is an error: baton and HAProxy bind with
# SO_REUSEPORT and would share it with a leftover or a manual run without a
# word.
for port in 24080 24180 24280 24900; do
	if [ -n "$(ss -Htln "sport = :$port")" ]; then
		echo "grpcbench: 127.0.0.1:$port is taken (by another process? stop it):" >&2
		ss -Htlnp "sport = :$port" >&2
		exit 1
	fi
done
out=${OUT:-docs/benchmarks.md}
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	[ -f "$work/nginx.pid" ] && kill -QUIT "$(cat "$work/nginx.pid")" 2>/dev/null || true
	sleep 1
	rm -rf "$work"
}
trap cleanup EXIT
CGO_ENABLED=0 go build -tags urfave_cli_no_docs -o "$work/baton" ./cmd/baton
go build -o "$work/backend" ./integration/cmd/backend
go build -o "$work/grpcload" ./integration/cmd/grpcload
cat > "$work/baton.yaml" <<EOC
controlSocket: $work/run/control.sock
workers: 2
listeners:
  - {name: web, address: "127.0.0.1:24080", reusePort: true}
backends:
  - {name: app, static: ["127.0.0.1:24900"], protocol: h2c}
routes:
  - {listener: web, backend: app}
EOC
cat > "$work/nginx.conf" <<EOC
worker_processes 2;
pid $work/nginx.pid;
error_log $work/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  upstream app { server 127.0.0.1:24900; keepalive 64; }
  server { listen 127.0.0.1:24180 http2; location / { grpc_pass grpc://app; } }
}
EOC
cat > "$work/haproxy.cfg" <<EOC
global
  nbthread 2
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend f
  bind 127.0.0.1:24280 proto h2
  default_backend b
backend b
  server s1 127.0.0.1:24900 proto h2
EOC
mkdir -p "$work/run"
"$work/backend" -http 127.0.0.1:24900 >"$work/backend.log" 2>&1 & pids+=($!)
"$work/baton" run --config "$work/baton.yaml" >"$work/baton.log" 2>&1 & pids+=($!)
baton=$!
nginx -c "$work/nginx.conf"
haproxy -W -f "$work/haproxy.cfg" >"$work/haproxy.log" 2>&1 & pids+=($!)
haproxy=$! # the master: SIGUSR2 reloads
sleep 2
measure() {
for c in 1 32; do
	for r in 1 2 3; do
		for t in baton:24080 nginx:24180 haproxy:24280; do
			echo "conns=$c round=$r ${t%%:*}: $("$work/grpcload" -addr "127.0.0.1:${t##*:}" -d 5s -conns "$c" | tail -1)"
		done
	done
done
for r in 1 2 3; do
	for t in baton:24080 nginx:24180 haproxy:24280; do
		echo "stream round=$r ${t%%:*}: $("$work/grpcload" -stream -addr "127.0.0.1:${t##*:}" -d 5s -conns 1 | tail -1)"
	done
done
reload() {
	case $1 in
	baton) kill -HUP "$baton" ;;
	nginx) nginx -c "$work/nginx.conf" -s reload 2>/dev/null ;;
	haproxy) kill -USR2 "$haproxy" ;;
	esac
}
for mode in unary stream; do
	flags=""
	[ "$mode" = stream ] && flags="-stream"
	for t in baton:24080 nginx:24180 haproxy:24280; do
		echo "15 reloads under $mode load, ${t%%:*}: $( ("$work/grpcload" $flags -addr "127.0.0.1:${t##*:}" -d 8s -conns 4 | tail -1) & sleep 1; for i in $(seq 15); do reload "${t%%:*}"; sleep 0.4; done; wait)"
	done
done
}
measure | tee "$work/results.txt"
go run ./integration/cmd/grpcreport < "$work/results.txt" > "$work/block.md"
./scripts/section.sh "$out" grpc "$work/block.md"
echo "grpcbench: wrote its section of $out"
