// Package kuberig runs a real Kubernetes control plane for the integration
// tests: etcd, kube-apiserver and, when asked, kube-controller-manager, on
// loopback inside a network namespace the test binary creates for itself.
// The API server refuses loopback addresses in EndpointSlices, so pods,
// Services and Gateways get addresses from the benchmarking range
// 198.18.0.0/15 on the namespace's own interfaces.
package kuberig

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// The control plane's addresses and the one user it knows.
const (
	APIAddr     = "127.0.0.1:6443"
	etcdClient  = "http://127.0.0.1:2379"
	Token       = "baton-integration-token"
	advertiseIP = "198.18.0.1"
	// ServiceRange is where Services get their ClusterIPs.
	ServiceRange = "198.18.128.0/20"
)

// ReexecInNetns runs this test binary again in a new network namespace
// (as root with `unshare --net`, else in a user namespace too), with env
// set so that the second run knows it is inside. It returns true in the
// second run; in the first it exits with the second's status.
func ReexecInNetns(env string) bool {
	if os.Getenv(env) != "" {
		return true
	}
	args := []string{"--net", "--"}
	if os.Geteuid() != 0 {
		args = []string{"--user", "--map-root-user", "--net", "--"}
	}
	cmd := exec.Command("unshare", append(args, os.Args...)...)
	cmd.Env = append(os.Environ(), env+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			os.Exit(ee.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "unshare:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return false
}

// IP runs ip(8) with args.
func IP(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// AddAddr puts ip on the namespace's lo, as a pod's or a Service's
// address; an address already there is not an error.
func AddAddr(ip string) error {
	out, err := exec.Command("ip", "addr", "add", ip+"/32", "dev", "lo").CombinedOutput()
	if err != nil && !strings.Contains(string(out), "File exists") && !strings.Contains(string(out), "already assigned") {
		return fmt.Errorf("ip addr add %s: %v: %s", ip, err, out)
	}
	return nil
}

// Bin returns the folder holding kube-apiserver, etcd and
// kube-controller-manager: $BATON_KUBEBIN, else .cache/kubebin under the
// repository root, built by `make kubebin`. A missing binary is an error,
// never a skip.
func Bin(root string, names ...string) (string, error) {
	dir := os.Getenv("BATON_KUBEBIN")
	if dir == "" {
		dir = filepath.Join(root, ".cache", "kubebin")
	}
	for _, b := range names {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%s missing (%v): run `make kubebin`", b, err)
		}
	}
	return filepath.Abs(dir)
}

// Options says what to run beside etcd and the API server.
type Options struct {
	// Bin is the folder of the binaries (see Bin).
	Bin string
	// ControllerManager runs kube-controller-manager with the controllers
	// that Deployments, EndpointSlices and namespace deletion need.
	ControllerManager bool
}

// Cluster is a running control plane.
type Cluster struct {
	// Dir holds its data and logs (name.log per process).
	Dir string
	// Kubeconfig is the path of a kubeconfig for an admin.
	Kubeconfig string
	// Config and Client are an admin's, with client-go's rate limit lifted:
	// tests write as fast as they can, and baton is what they measure.
	Config *rest.Config
	Client kubernetes.Interface

	procs []*exec.Cmd
}

// controllers are those the conformance suite's manifests need: Deployments
// to Pods, Services to EndpointSlices, namespaces deleted with what is in
// them, owned objects collected.
var controllers = "deployment-controller,replicaset-controller,endpointslice-controller,endpointslice-mirroring-controller," +
	"namespace-controller,garbage-collector-controller,serviceaccount-controller"

// Start runs the control plane with its data in dir and waits until the
// API server is ready. On error, what was started is stopped.
func Start(dir string, opts Options) (*Cluster, error) {
	c := &Cluster{Dir: dir}
	if err := c.start(opts); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(opts Options) error {
	// The API server advertises an address; the namespace has no route,
	// so it gets one on lo.
	if err := AddAddr(advertiseIP); err != nil {
		return err
	}
	if err := c.run(opts.Bin, "etcd", "--data-dir", filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls", etcdClient, "--advertise-client-urls", etcdClient,
		"--listen-peer-urls", "http://127.0.0.1:2380", "--log-level", "warn"); err != nil {
		return err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	keyFile := filepath.Join(c.Dir, "sa.key")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	tokens := filepath.Join(c.Dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(Token+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		return err
	}
	if err := c.run(opts.Bin, "kube-apiserver", "--bind-address=127.0.0.1", "--secure-port=6443", "--advertise-address="+advertiseIP,
		"--etcd-servers="+etcdClient, "--token-auth-file="+tokens, "--authorization-mode=AlwaysAllow",
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file="+keyFile,
		"--service-account-signing-key-file="+keyFile, "--service-cluster-ip-range="+ServiceRange,
		"--endpoint-reconciler-type=none", "--disable-admission-plugins=ServiceAccount",
		"--kubelet-preferred-address-types=InternalIP",
		"--cert-dir="+filepath.Join(c.Dir, "certs")); err != nil {
		return err
	}
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
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
`, APIAddr, Token)
	if err := os.WriteFile(c.Kubeconfig, []byte(kc), 0o600); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 5000, 5000
	c.Config = cfg
	if c.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if err := c.waitReady(); err != nil {
		return err
	}
	if opts.ControllerManager {
		return c.run(opts.Bin, "kube-controller-manager", "--kubeconfig="+c.Kubeconfig,
			"--controllers="+controllers, "--service-account-private-key-file="+keyFile,
			"--use-service-account-credentials=false", "--bind-address=127.0.0.1", "--secure-port=10257",
			"--cert-dir="+filepath.Join(c.Dir, "kcm-certs"), "--leader-elect=false",
			"--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10")
	}
	return nil
}

// run starts bin/name with args, its output in name.log.
func (c *Cluster) run(bin, name string, args ...string) error {
	log, err := os.Create(filepath.Join(c.Dir, name+".log"))
	if err != nil {
		return err
	}
	defer log.Close() // the child has its own descriptor
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	c.procs = append(c.procs, cmd)
	return nil
}

func (c *Cluster) waitReady() error {
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 2 * time.Second}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		req, _ := http.NewRequest("GET", "https://"+APIAddr+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+Token)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver not ready after 2 minutes; see %s", filepath.Join(c.Dir, "kube-apiserver.log"))
		}
	}
}

// Stop stops the processes, the last started first: SIGTERM, and SIGKILL
// after 10 seconds.
func (c *Cluster) Stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			p.Process.Kill()
			<-done
		}
	}
	c.procs = nil
}

// GatewayCRDs installs the Gateway API's CRDs of channel ("standard" or
// "experimental") from the module folder dir of sigs.k8s.io/gateway-api,
// and waits until the API server serves HTTPRoutes.
func GatewayCRDs(cfg *rest.Config, dir, channel string) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	files, _ := filepath.Glob(filepath.Join(dir, "config", "crd", channel, "*.yaml"))
	if len(files) == 0 {
		return fmt.Errorf("no %s CRDs in %s", channel, dir)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var obj map[string]any
		if err := yaml.Unmarshal(b, &obj); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if obj["kind"] != "CustomResourceDefinition" {
			continue // the safe-upgrades admission policy: not needed here
		}
		if _, err := crds.Create(context.Background(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	routes := dyn.Resource(schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "httproutes"})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := routes.List(context.Background(), metav1.ListOptions{}); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("the Gateway API's CRDs not served after 30s: %w", err)
		}
	}
}
