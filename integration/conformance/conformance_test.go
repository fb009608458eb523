// Package conformance runs the Gateway API's upstream conformance suite,
// unmodified, against the real baton binary: a real kube-apiserver,
// kube-controller-manager and etcd, a stand-in kubelet that runs the
// suite's echo-basic pods as processes in network namespaces of their own,
// and baton's Gateway addresses routed to loopback, all inside a network
// namespace the test binary creates for itself. `make conformance` runs it
// with the suite's flags:
//
//	go test -run TestConformance -args -conformance-profiles=GATEWAY-HTTP -report-output=report.yaml
//
// It is a module of its own so that the main module's go.mod does not carry
// the suite's dependencies (controller-runtime, gRPC, testify).
package conformance

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/harness"
	"github.com/baton-proxy/baton/integration/internal/kubelet"
	"github.com/baton-proxy/baton/integration/internal/kuberig"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/gateway-api/conformance"
)

const (
	netnsEnv = "BATON_CONFORMANCE_NETNS"
	// gatewayPool is where Gateways get their addresses: routed to lo,
	// bound by baton with IP_FREEBIND.
	gatewayPool = "198.18.64.0/24"
	podRange    = "198.18.16.0/20"
	nodeIP      = "198.18.0.2"
	// className is the GatewayClass the suite runs against.
	className      = "baton"
	controllerName = "baton-proxy.github.io/gateway"
)

var (
	cluster  *kuberig.Cluster
	batonBin string
	root     = filepath.Join("..", "..")
)

func TestMain(m *testing.M) {
	kuberig.ReexecInNetns(netnsEnv)
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"route", "add", "local", gatewayPool, "dev", "lo"}} {
		if err := kuberig.IP(args...); err != nil {
			return 0, err
		}
	}
	if err := kuberig.AddAddr(nodeIP); err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "baton-conformance-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)

	// baton as `make build` makes it, from the repository's own module.
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "baton"), "./cmd/baton")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return 0, fmt.Errorf("build baton: %w", err)
	}
	batonBin = filepath.Join(dir, "baton")
	echo, err := harness.Build(dir, "echo-basic", "sigs.k8s.io/gateway-api/conformance/echo-basic", false)
	if err != nil {
		return 0, err
	}
	dns, err := harness.Build(dir, "dnsecho", "github.com/baton-proxy/baton/integration/conformance/cmd/dnsecho", false)
	if err != nil {
		return 0, err
	}

	bin, err := kuberig.Bin(root, "kube-apiserver", "kube-controller-manager", "etcd")
	if err != nil {
		return 0, err
	}
	if cluster, err = kuberig.Start(dir, kuberig.Options{Bin: bin, ControllerManager: true}); err != nil {
		return 0, err
	}
	defer cluster.Stop()
	mod, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		return 0, fmt.Errorf("the gateway-api module: %w", err)
	}
	if err := kuberig.GatewayCRDs(cluster.Config, strings.TrimSpace(string(mod)), "standard"); err != nil {
		return 0, err
	}

	klog, err := os.OpenFile(filepath.Join(dir, "kubelet.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer klog.Close() // after the kubelet's Run, which is its last writer
	ctx, cancel := context.WithCancel(context.Background())
	kl := &kubelet.Kubelet{
		Client: cluster.Client, Node: "conformance", NodeIP: netip.MustParseAddr(nodeIP), Pods: netip.MustParsePrefix(podRange),
		// The suite's backends; the UDP tests' CoreDNS, which baton does
		// not serve, is a small DNS server of the same ports.
		Images: map[string]string{"echo-basic": echo, "coredns": dns},
		Dir:    filepath.Join(dir, "kubelet"),
		Logf:   func(format string, args ...any) { fmt.Fprintf(klog, format+"\n", args...) },
	}
	done := make(chan error, 1)
	go func() { done <- kl.Run(ctx) }()
	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		return 0, fmt.Errorf("kubelet: %w", err)
	}
	return code, nil
}

// TestConformance runs the suite with its own flags (see the package
// comment) against GatewayClass baton, whose supportedFeatures say what is
// claimed.
func TestConformance(t *testing.T) {
	t.Setenv("KUBECONFIG", cluster.Kubeconfig)
	harness.Start(t, batonBin, fmt.Sprintf(`controlSocket: "@DIR@/run/control.sock"
readyTimeout: 20s
kubernetes:
  kubeconfig: %s
gateway:
  controllerName: %s
  addresses: [%s]
`, cluster.Kubeconfig, controllerName, gatewayPool))
	dyn, err := dynamic.NewForConfig(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	class := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
		"metadata": map[string]any{"name": className},
		"spec":     map[string]any{"controllerName": controllerName},
	}}
	gvr := schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gatewayclasses"}
	if _, err := dyn.Resource(gvr).Create(context.Background(), class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The suite reads what is claimed from the class's status: wait for it.
	harness.WaitFor(t, time.Minute, "GatewayClass baton Accepted, with its supportedFeatures", func() bool {
		u, err := dyn.Resource(gvr).Get(context.Background(), className, metav1.GetOptions{})
		if err != nil {
			return false
		}
		fs, _, _ := unstructured.NestedSlice(u.Object, "status", "supportedFeatures")
		return len(fs) > 0
	})
	opts := conformance.DefaultOptions(t)
	opts.GatewayClassName = className
	conformance.RunConformanceWithOptions(t, opts)
}
