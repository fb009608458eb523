#!/usr/bin/env bash
# Builds the real kube-apiserver, kube-controller-manager and etcd that the
# Kubernetes integration tests and the Gateway API conformance suite run,
# from the Go module proxy (integration/kubebin pins them), into
# .cache/kubebin, once: about 5-15 minutes cold on 2 cores, nothing after.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$PWD/.cache/kubebin"
version=v1.37.2
if [ -x "$out/kube-apiserver" ] && [ -x "$out/kube-controller-manager" ] && [ -x "$out/etcd" ] && [ "$(cat "$out/version" 2>/dev/null)" = "$version" ]; then
  exit 0
fi
mkdir -p "$out"
cd integration/kubebin
ldflags="-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"
echo "kubebin: building kube-apiserver and kube-controller-manager $version and etcd (once; minutes on a cold cache)" >&2
[ -x "$out/kube-apiserver" ] && [ "$(cat "$out/version" 2>/dev/null)" = "$version" ] ||
  go build -trimpath -ldflags "$ldflags" -o "$out/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
go build -trimpath -ldflags "$ldflags" -o "$out/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager
go build -trimpath -o "$out/etcd" ./etcd
echo "$version" > "$out/version"
