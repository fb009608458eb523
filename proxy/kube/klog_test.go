package kube

import (
	"errors"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"k8s.io/klog/v2"
)

// TestRouteKlog: client-go's log calls (klog) reach zap, named client-go,
// with their key-value pairs; an error at error level.
func TestRouteKlog(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	RouteKlog(zap.New(core))
	klog.InfoS("watch closed", "resource", "services")
	klog.ErrorS(errors.New("connection refused"), "list failed", "namespace", "default")
	klog.V(4).InfoS("chatty")
	klog.Flush()
	got := logs.All()
	if len(got) != 2 {
		t.Fatalf("%d entries, want 2 (V(4) off at info): %v", len(got), got)
	}
	if e := got[0]; e.LoggerName != "client-go" || e.Message != "watch closed" || e.ContextMap()["resource"] != "services" {
		t.Errorf("info entry %+v", e)
	}
	if e := got[1]; e.Level != zapcore.ErrorLevel || e.ContextMap()["error"] != "connection refused" || e.ContextMap()["namespace"] != "default" {
		t.Errorf("error entry %+v %v", e, e.ContextMap())
	}
}
