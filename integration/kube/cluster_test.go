// Package kube runs baton against a real kube-apiserver and etcd, with
// backends that are real processes, all inside a network namespace the
// test binary creates for itself: the API server refuses loopback
// addresses in EndpointSlices, so pods and Services get addresses from the
// benchmarking range 198.18.0.0/15 on the namespace's own lo.
package kube

import (
	"bufio"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/harness"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	gatewayPool = "198.18.64.0/24"
	netnsEnv    = "BATON_TEST_NETNS"
	apiAddr     = "127.0.0.1:6443"
	etcdClient  = "http://127.0.0.1:2379"
	token       = "baton-integration-token"
)

// The cluster every test of the package uses.
var (
	kubeconfig string
	client     kubernetes.Interface
	batonBin   string
	backendBin string
)

func TestMain(m *testing.M) {
	if os.Getenv(netnsEnv) == "" {
		os.Exit(reexecInNetns())
	}
	code, err := runInNetns(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kube integration:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

// reexecInNetns runs this test binary again in a new network namespace:
// as root with `unshare --net`, else in a user namespace too.
func reexecInNetns() int {
	args := []string{"--net", "--"}
	if os.Geteuid() != 0 {
		args = []string{"--user", "--map-root-user", "--net", "--"}
	}
	cmd := exec.Command("unshare", append(args, os.Args...)...)
	cmd.Env = append(os.Environ(), netnsEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "kube integration: unshare:", err)
		return 1
	}
	return 0
}

func runInNetns(m *testing.M) (int, error) {
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return 0, fmt.Errorf("ip link set lo up: %v: %s", err, out)
	}
	// The Gateways' address pool, routed to this host without being on an
	// interface (baton binds them with IP_FREEBIND).
	if out, err := exec.Command("ip", "route", "add", "local", gatewayPool, "dev", "lo").CombinedOutput(); err != nil {
		return 0, fmt.Errorf("ip route add local %s: %v: %s", gatewayPool, err, out)
	}
	dir, err := os.MkdirTemp("", "baton-kube-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	if err := buildBinaries(dir); err != nil {
		return 0, err
	}
	stop, err := startCluster(dir)
	defer stop()
	if err != nil {
		return 0, err
	}
	return m.Run(), nil
}

// kubebin returns the folder holding kube-apiserver and etcd: built by
// `make kubebin`. Missing binaries fail the tests; they are not skipped.
func kubebin() (string, error) {
	dir := os.Getenv("BATON_KUBEBIN")
	if dir == "" {
		dir = filepath.Join("..", "..", ".cache", "kubebin")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%s missing (%v): run `make kubebin`", b, err)
		}
	}
	return filepath.Abs(dir)
}

func buildBinaries(dir string) (err error) {
	if batonBin, err = harness.BuildBaton(dir, raceEnabled); err != nil {
		return err
	}
	backendBin, err = harness.Build(dir, "backend", "github.com/baton-proxy/baton/integration/cmd/backend", false)
	return err
}

// startCluster runs etcd and kube-apiserver on loopback and waits until
// the API server is ready. The returned function stops them.
func startCluster(dir string) (func(), error) {
	bin, err := kubebin()
	if err != nil {
		return func() {}, err
	}
	var procs []*exec.Cmd
	stop := func() {
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { procs[i].Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				procs[i].Process.Kill()
				<-done
			}
		}
	}
	start := func(name string, args ...string) error {
		log, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			return err
		}
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			return err
		}
		procs = append(procs, cmd)
		return nil
	}
	// The API server advertises an address; the namespace has no route,
	// so it gets one on lo.
	if err := addAddr("198.18.0.1"); err != nil {
		return stop, err
	}
	if err := start("etcd", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdClient, "--advertise-client-urls", etcdClient,
		"--listen-peer-urls", "http://127.0.0.1:2380", "--log-level", "warn"); err != nil {
		return stop, err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return stop, err
	}
	keyFile := filepath.Join(dir, "sa.key")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return stop, err
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(token+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		return stop, err
	}
	if err := start("kube-apiserver", "--bind-address=127.0.0.1", "--secure-port=6443", "--advertise-address=198.18.0.1",
		"--etcd-servers="+etcdClient, "--token-auth-file="+tokens, "--authorization-mode=AlwaysAllow",
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file="+keyFile,
		"--service-account-signing-key-file="+keyFile, "--service-cluster-ip-range=198.18.128.0/20",
		"--endpoint-reconciler-type=none", "--disable-admission-plugins=ServiceAccount",
		"--cert-dir="+filepath.Join(dir, "certs")); err != nil {
		return stop, err
	}
	kubeconfig = filepath.Join(dir, "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: "https://%s", insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: %s}
contexts:
- name: test
  context: {cluster: test, user: admin}
current-context: test
`, apiAddr, token)
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
		return stop, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return stop, err
	}
	// The tests write as fast as they can; client-go's default limit (5
	// writes a second) would be measured instead of baton.
	cfg.QPS, cfg.Burst = 5000, 5000
	client, err = kubernetes.NewForConfig(cfg)
	if err != nil {
		return stop, err
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: insecureTLS()}, Timeout: 2 * time.Second}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		req, _ := http.NewRequest("GET", "https://"+apiAddr+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return stop, nil
			}
		}
		if time.Now().After(deadline) {
			return stop, fmt.Errorf("kube-apiserver not ready after 2 minutes; see %s", filepath.Join(dir, "kube-apiserver.log"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// addAddr puts ip on the namespace's lo, as a pod's or a Service's address.
func addAddr(ip string) error {
	out, err := exec.Command("ip", "addr", "add", ip+"/32", "dev", "lo").CombinedOutput()
	if err != nil && !strings.Contains(string(out), "File exists") && !strings.Contains(string(out), "already assigned") {
		return fmt.Errorf("ip addr add %s: %v: %s", ip, err, out)
	}
	return nil
}

// pod is a backend process listening on a pod address.
type pod struct {
	name string
	ip   string
	cmd  *exec.Cmd
	done chan struct{}
}

// startPod runs the test backend as a pod on ip:8080 and waits until it
// accepts connections.
func startPod(t *testing.T, name, ip string) *pod {
	t.Helper()
	if err := addAddr(ip); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(backendBin, "-http", ip+":8080", "-name", name)
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
