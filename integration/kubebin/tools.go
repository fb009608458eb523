//go:build tools

// Package kubebin pins the real kube-apiserver, kube-controller-manager and etcd that the Kubernetes
// integration tests run. It is a module of its own so that the main module's
// go.mod does not carry k8s.io/kubernetes.
package kubebin

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
