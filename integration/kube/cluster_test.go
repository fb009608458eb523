// Package kube runs baton against a real kube-apiserver and etcd, with
// backends that are real processes, all inside a network namespace the
// test binary creates for itself: the API server refuses loopback
// addresses in EndpointSlices, so pods and Services get addresses from the
// benchmarking range 198.18.0.0/15 on the namespace's own lo.
package kube

import (
	"bufio"

	"github.com/baton-proxy/baton/integration/internal/kuberig"

	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/harness"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const (
	gatewayPool = "198.18.64.0/24"
	netnsEnv    = "BATON_TEST_NETNS"
)

// The cluster every test of the package uses.
var (
	kubeconfig string
	client     kubernetes.Interface
	restConfig *rest.Config // the cluster's, without client-go's rate limit
	batonBin   string
	backendBin string
)

func TestMain(m *testing.M) {
	kuberig.ReexecInNetns(netnsEnv)
	code, err := runInNetns(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kube integration:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func runInNetns(m *testing.M) (int, error) {
	if err := kuberig.IP("link", "set", "lo", "up"); err != nil {
		return 0, err
	}
	// The Gateways' address pool, routed to this host without being on an
	// interface (baton binds them with IP_FREEBIND).
	if err := kuberig.IP("route", "add", "local", gatewayPool, "dev", "lo"); err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "baton-kube-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	if err := buildBinaries(dir); err != nil {
		return 0, err
	}
	bin, err := kuberig.Bin(filepath.Join("..", ".."), "kube-apiserver", "etcd")
	if err != nil {
		return 0, err
	}
	cluster, err := kuberig.Start(dir, kuberig.Options{Bin: bin})
	if err != nil {
		return 0, err
	}
	defer cluster.Stop()
	kubeconfig, client, restConfig = cluster.Kubeconfig, cluster.Client, cluster.Config
	return m.Run(), nil
}

func buildBinaries(dir string) (err error) {
	if batonBin, err = harness.BuildBaton(dir, raceEnabled); err != nil {
		return err
	}
	backendBin, err = harness.Build(dir, "backend", "github.com/baton-proxy/baton/integration/cmd/backend", false)
	return err
}

// addAddr puts ip on the namespace's lo, as a pod's or a Service's address.
func addAddr(ip string) error { return kuberig.AddAddr(ip) }

// pod is a backend process listening on a pod address.
type pod struct {
	name string
	ip   string
	cmd  *exec.Cmd
	done chan struct{}
}

// startPod runs the test backend as a pod on ip:8080 and waits until it
// accepts connections.
func startPod(t testing.TB, name, ip string, args ...string) *pod {
	t.Helper()
	if err := addAddr(ip); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(backendBin, append([]string{"-http", ip + ":8080", "-name", name}, args...)...)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &pod{name: name, ip: ip, cmd: cmd, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(p.done)
	}()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.HasPrefix(line, "backend") {
		t.Fatalf("pod %s: %q %v", name, line, err)
	}
	t.Cleanup(func() { p.stop() })
	return p
}

// stop ends the pod as a kubelet does: SIGTERM, and the application
// finishes what is in flight.
func (p *pod) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *pod) addr() string { return net.JoinHostPort(p.ip, "8080") }
