package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/baton-proxy/baton/ipc"
	"github.com/baton-proxy/baton/supervisor"
)

// Ports, all on 127.0.0.1, below the ephemeral range (32768 and up), where
// a client connection of the load could hold them. Each target gets its
// own so that a lingering socket of one cannot serve another's traffic.
const (
	backendHTTP = "127.0.0.1:19000"
	backendTCP  = "127.0.0.1:19001"
	// backendTLS serves the same over TLS (a self-signed certificate):
	// what the TLS passthrough row reaches.
	backendTLS = "127.0.0.1:19443"
)

// target is a proxy under test (or the backend itself, "direct").
type target interface {
	Name() string
	// Start runs the target and returns once it serves.
	Start() error
	// Reload asks for a zero-downtime reload, the target's own way.
	Reload() error
	// Stop stops every process of the target.
	Stop()
	HTTPAddr() string
	TCPAddr() string
	// HTTPSAddr is the TLS listener's address, the same routes as
	// HTTPAddr's; empty when the target has none.
	HTTPSAddr() string
	// PIDs returns the target's processes by role ("master", "worker").
	PIDs() map[string][]int
}

// proc is a process a target started, stopped by PID.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func startProc(dir, name string, args ...string) (*proc, error) {
	logf, err := os.Create(filepath.Join(dir, filepath.Base(name)+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	go func() {
		cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	return p, nil
}

// stop sends sig, then SIGKILL to the process group after grace.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) {
	if p == nil {
		return
	}
	p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(grace):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}

// waitServing waits until addr accepts connections.
func waitServing(addr string, p *proc) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if p != nil {
			select {
			case <-p.exited:
				return fmt.Errorf("%s exited at start (see its log)", p.cmd.Path)
			default:
			}
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s not serving after 30s", addr)
}

// children returns the child pids of pid.
func children(pid int) []int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// direct is the backend reached without a proxy: the ceiling.
type direct struct{}

func (direct) Name() string           { return "direct" }
func (direct) Start() error           { return nil }
func (direct) Reload() error          { return errors.New("direct has no reload") }
func (direct) Stop()                  {}
func (direct) HTTPAddr() string       { return backendHTTP }
func (direct) TCPAddr() string        { return backendTCP }
func (direct) HTTPSAddr() string      { return "" }
func (direct) PIDs() map[string][]int { return nil }

// start starts t once its ports are free. A port another process holds is
// an error: baton and HAProxy bind with SO_REUSEPORT, so they would join
// a leftover's or a manual run's group on the same port without a word,
// and share the load with it. A stopped target's last process may take a
// moment to let go: the ports get 10 s.
func start(t target) error {
	if _, ok := t.(direct); ok {
		return t.Start() // the backend's own ports, in use
	}
	addrs := []string{t.HTTPAddr(), t.TCPAddr(), t.HTTPSAddr()}
	if p, ok := t.(interface{ passthroughAddr() string }); ok {
		addrs = append(addrs, p.passthroughAddr())
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, addr := range addrs {
		if addr == "" {
			continue
		}
		for {
			ln, err := net.Listen("tcp", addr)
			if err == nil {
				ln.Close()
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s is taken (by another process? stop it): %w", addr, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return t.Start()
}

// tlsFiles are the certificate every target serves over TLS: PEM files of
// the chain and the key, and both in one file (HAProxy's crt).
type tlsFiles struct{ cert, key, combined string }

// baton runs bin/baton (name "baton"), or bin/baton-openssl, built with
// OpenSSL's RSA signatures (name "baton-openssl").
type baton struct {
	name      string
	port      int // the base of its ports: port+80 (HTTP), +81 (TCP), +443 (HTTPS)
	dir, bin  string
	workers   int
	tls       tlsFiles
	accessLog bool // log every request (JSON, to a file)
	defaults  bool // baton's own maxRequestsPerConnection, not nginx's here
	p         *proc
}

func (b *baton) Name() string      { return b.name }
func (b *baton) HTTPAddr() string  { return b.addr(80) }
func (b *baton) TCPAddr() string   { return b.addr(81) }
func (b *baton) HTTPSAddr() string { return b.addr(443) }
func (b *baton) addr(p int) string { return "127.0.0.1:" + strconv.Itoa(b.port+p) }

// passthroughAddr is where TLS is routed by SNI without termination.
func (b *baton) passthroughAddr() string { return b.addr(444) }
func (b *baton) socket() string          { return filepath.Join(b.dir, "run", "control.sock") }

func (b *baton) Start() error {
	cfg := fmt.Sprintf(`controlSocket: %s
readyTimeout: 10s
drainTimeout: 30s
workers: %d
%slisteners:
  - name: web
    address: %s
    protocol: http
    reusePort: true
  - name: echo
    address: %s
    protocol: tcp
    reusePort: true
  - name: websecure
    address: %s
    protocol: http
    reusePort: true
    tls:
      certificates: [{certFile: %q, keyFile: %q}]
  - name: pass
    address: %s
    protocol: tcp
    reusePort: true
    tls: {mode: passthrough}
backends:
  - name: app
    static: [%q]
  - name: echo
    static: [%q]
  - name: tlsapp
    static: [%q]
routes:
  - listener: web
    pathPrefix: /
    backend: app
  - listener: websecure
    pathPrefix: /
    backend: app
  - listener: echo
    backend: echo
  - listener: pass
    host: bench.example
    backend: tlsapp
`, b.socket(), b.workers, b.tuning(), b.HTTPAddr(), b.TCPAddr(), b.HTTPSAddr(), b.tls.cert, b.tls.key, b.passthroughAddr(), backendHTTP, backendTCP, backendTLS)
	if b.accessLog {
		cfg += fmt.Sprintf("accessLog: {path: %q, format: json}\n", filepath.Join(b.dir, "access.log"))
	}
	path := filepath.Join(b.dir, "baton.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return err
	}
	var err error
	b.p, err = startProc(b.dir, b.bin, "--log-format", "json", "--log-level", "warn", "run", "--config", path)
	if err != nil {
		return err
	}
	// The supervisor's sockets accept before the first generation is
	// ready: wait for it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := b.status()
		if err == nil && st.Ready {
			return b.checkOpenSSL()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("baton not ready after 30s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tuning is the config's http section: the requests per connection of
// nginx's config here (keepalive_requests), unless the target runs with
// its defaults.
func (b *baton) tuning() string {
	if b.defaults {
		return ""
	}
	return "http:\n  maxRequestsPerConnection: 100000\n"
}

func (b *baton) Reload() error { return b.p.cmd.Process.Signal(syscall.SIGHUP) }

// ReloadWait reloads through the control socket and waits for the outcome.
func (b *baton) ReloadWait() (supervisor.Handoff, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := ipc.Call(ctx, b.socket(), ipc.Request{Command: supervisor.CommandReload})
	if err != nil {
		return supervisor.Handoff{}, err
	}
	var h supervisor.Handoff
	if err := json.Unmarshal(resp.Result, &h); err != nil {
		return h, err
	}
	if !resp.OK {
		return h, errors.New(resp.Error)
	}
	return h, nil
}

func (b *baton) status() (*supervisor.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := ipc.Call(ctx, b.socket(), ipc.Request{Command: supervisor.CommandStatus})
	if err != nil {
		return nil, err
	}
	if !resp.OK {
		return nil, fmt.Errorf("baton status: %s", resp.Error)
	}
	var st supervisor.Status
	return &st, json.Unmarshal(resp.Result, &st)
}

// checkOpenSSL makes sure that the workers of baton-openssl loaded
// OpenSSL's libcrypto (else they sign in Go, and the row says nothing).
func (b *baton) checkOpenSSL() error {
	if b.name != "baton-openssl" {
		return nil
	}
	for _, pid := range b.PIDs()["worker"] {
		maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
		if err != nil {
			return err
		}
		if !strings.Contains(string(maps), "libcrypto.so") {
			return fmt.Errorf("worker %d has no libcrypto: its RSA keys sign in Go", pid)
		}
	}
	return nil
}

func (b *baton) Stop() { b.p.stop(syscall.SIGTERM, 40*time.Second) }

func (b *baton) PIDs() map[string][]int {
	m := map[string][]int{"master": {b.p.cmd.Process.Pid}}
	st, err := b.status()
	if err != nil {
		return m
	}
	for _, g := range st.Generations {
		if g.ID == st.ActiveGeneration {
			for _, w := range g.Workers {
				m["worker"] = append(m["worker"], w.PID)
			}
		}
	}
	return m
}

// nginx runs Debian's nginx with its master in the foreground; reload is
// `nginx -s reload`. Like HAProxy's, its config sends the backend the
// X-Forwarded-For, -Proto and -Host headers that baton and Caddy send by
// default (as ingress-nginx does): the backend shares the machine, and
// each header it parses costs it CPU, so every target asks the same of it.
// Its TCP streams pass a half-close on (proxy_half_close), as baton's and
// HAProxy's do: without it nginx ends a stream at the first FIN, which
// costs a shutdown, a read and a wake less a stream, and loses what the
// backend still had to say to a client that only shut its writing side.
type nginx struct {
	dir string
	tls tlsFiles
	p   *proc
	// defaults: nginx's own keepalive_requests (1000), not the
	// benchmark's.
	defaults bool
}

func (n *nginx) Name() string      { return "nginx" }
func (n *nginx) HTTPAddr() string  { return "127.0.0.1:28080" }
func (n *nginx) TCPAddr() string   { return "127.0.0.1:28081" }
func (n *nginx) HTTPSAddr() string { return "127.0.0.1:28443" }
func (n *nginx) conf() string      { return filepath.Join(n.dir, "nginx.conf") }

// passthroughAddr is ssl_preread's: TLS routed by SNI, not terminated.
func (n *nginx) passthroughAddr() string { return "127.0.0.1:28444" }

func (n *nginx) Start() error {
	stream := ""
	if _, err := os.Stat("/usr/lib/nginx/modules/ngx_stream_module.so"); err == nil {
		stream = "load_module /usr/lib/nginx/modules/ngx_stream_module.so;\n"
	}
	cfg := stream + fmt.Sprintf(`worker_processes 2;
daemon off;
master_process on;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 16384; }
http {
    access_log off;
    %[9]s
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    upstream app { server %[2]s; keepalive 256; }
    server {
        listen %[3]s;
        listen %[6]s ssl http2;
        ssl_certificate %[7]s;
        ssl_certificate_key %[8]s;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:SSL:10m;
        location / {
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_set_header X-Forwarded-Host $http_host;
        }
    }
}
stream {
    server { listen %[4]s; proxy_pass %[5]s; proxy_half_close on; }
    map $ssl_preread_server_name $tlsup { bench.example %[11]s; }
    server { listen %[10]s; ssl_preread on; proxy_pass $tlsup; proxy_half_close on; }
}
`, n.dir, backendHTTP, n.HTTPAddr(), n.TCPAddr(), backendTCP, n.HTTPSAddr(), n.tls.cert, n.tls.key, map[bool]string{false: "keepalive_requests 100000;", true: ""}[n.defaults],
		n.passthroughAddr(), backendTLS)
	if err := os.WriteFile(n.conf(), []byte(cfg), 0o644); err != nil {
		return err
	}
	var err error
	n.p, err = startProc(n.dir, "/usr/sbin/nginx", "-c", n.conf(), "-p", n.dir)
	if err != nil {
		return err
	}
	for _, a := range []string{n.HTTPAddr(), n.HTTPSAddr()} {
		if err := waitServing(a, n.p); err != nil {
			return err
		}
	}
	return waitServing(n.TCPAddr(), n.p)
}

func (n *nginx) Reload() error {
	out, err := exec.Command("/usr/sbin/nginx", "-c", n.conf(), "-p", n.dir, "-s", "reload").CombinedOutput()
	if err != nil {
		return fmt.Errorf("nginx -s reload: %v: %s", err, out)
	}
	return nil
}

func (n *nginx) Stop() { n.p.stop(syscall.SIGQUIT, 40*time.Second) }

func (n *nginx) PIDs() map[string][]int {
	return map[string][]int{"master": {n.p.cmd.Process.Pid}, "worker": children(n.p.cmd.Process.Pid)}
}

// haproxy runs Debian's HAProxy in master-worker mode; reload is SIGUSR2 to
// the master, which starts a new worker that takes the listeners' fds from
// the old one (expose-fd listeners): HAProxy's seamless reload.
type haproxy struct {
	dir string
	tls tlsFiles
	p   *proc
}

func (h *haproxy) Name() string      { return "haproxy" }
func (h *haproxy) HTTPAddr() string  { return "127.0.0.1:29080" }
func (h *haproxy) TCPAddr() string   { return "127.0.0.1:29081" }
func (h *haproxy) HTTPSAddr() string { return "127.0.0.1:29443" }

// passthroughAddr is req.ssl_sni's: TLS routed by SNI, not terminated.
func (h *haproxy) passthroughAddr() string { return "127.0.0.1:29444" }

// haproxyMaxConn is the most HAProxy may take under this machine's limit
// of 20,000 descriptors a process: it asks for two per connection and 28
// more, and refuses to start otherwise.
const haproxyMaxConn = 9980

// maxIdle is how many idle connections the idle row can hold open.
func (h *haproxy) maxIdle() int { return haproxyMaxConn - 20 }

func (h *haproxy) Start() error {
	cfg := fmt.Sprintf(`global
    master-worker
    nbthread 2
    maxconn %[8]d
    stats socket %[1]s/admin.sock mode 600 level admin expose-fd listeners
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 60s
frontend web
    bind %[2]s
    http-request set-header X-Forwarded-Proto http
    default_backend app
frontend websecure
    bind %[6]s ssl crt %[7]s alpn h2,http/1.1
    http-request set-header X-Forwarded-Proto https
    default_backend app
backend app
    http-reuse always
    option forwardfor
    http-request set-header X-Forwarded-Host %%[req.hdr(host)]
    server s1 %[3]s
frontend echo
    mode tcp
    bind %[4]s
    default_backend echo
backend echo
    mode tcp
    server s1 %[5]s
frontend pass
    mode tcp
    bind %[9]s
    tcp-request inspect-delay 10s
    tcp-request content accept if { req_ssl_hello_type 1 }
    use_backend tlsapp if { req.ssl_sni -i bench.example }
backend tlsapp
    mode tcp
    server s1 %[10]s
`, h.dir, h.HTTPAddr(), backendHTTP, h.TCPAddr(), backendTCP, h.HTTPSAddr(), h.tls.combined, haproxyMaxConn, h.passthroughAddr(), backendTLS)
	path := filepath.Join(h.dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return err
	}
	var err error
	h.p, err = startProc(h.dir, "/usr/sbin/haproxy", "-W", "-db", "-f", path)
	if err != nil {
		return err
	}
	for _, a := range []string{h.HTTPAddr(), h.HTTPSAddr()} {
		if err := waitServing(a, h.p); err != nil {
			return err
		}
	}
	return waitServing(h.TCPAddr(), h.p)
}

func (h *haproxy) Reload() error { return h.p.cmd.Process.Signal(syscall.SIGUSR2) }

func (h *haproxy) Stop() { h.p.stop(syscall.SIGUSR1, 40*time.Second) }

func (h *haproxy) PIDs() map[string][]int {
	return map[string][]int{"master": {h.p.cmd.Process.Pid}, "worker": children(h.p.cmd.Process.Pid)}
}

// caddy runs Caddy (built by scripts/caddybin.sh into .cache/caddybin) as
// its documentation has it run in production: `caddy run` with a
// Caddyfile, reloaded in place by `caddy reload` through its admin API
// (its graceful reload: one process, new servers on the same sockets).
// Its defaults otherwise: HTTP/1.1 and HTTP/2, upstream keep-alive,
// GOMAXPROCS of the machine, no access log. Caddy proxies no raw TCP
// without a plugin, so it has no TCP rows.
type caddy struct {
	dir string
	bin string
	tls tlsFiles
	p   *proc
}

func (c *caddy) Name() string      { return "caddy" }
func (c *caddy) HTTPAddr() string  { return "127.0.0.1:27080" }
func (c *caddy) TCPAddr() string   { return "" }
func (c *caddy) HTTPSAddr() string { return "127.0.0.1:27443" }
func (c *caddy) admin() string     { return "127.0.0.1:27019" }
func (c *caddy) conf() string      { return filepath.Join(c.dir, "Caddyfile") }

func (c *caddy) Start() error {
	cfg := fmt.Sprintf(`{
	admin %[1]s
	auto_https off
	persist_config off
	grace_period 10s
	storage file_system %[2]s/data
}
http://%[3]s {
	reverse_proxy %[4]s
}
https://%[5]s {
	tls %[6]s %[7]s
	reverse_proxy %[4]s
}
`, c.admin(), c.dir, c.HTTPAddr(), backendHTTP, c.HTTPSAddr(), c.tls.cert, c.tls.key)
	if err := os.WriteFile(c.conf(), []byte(cfg), 0o644); err != nil {
		return err
	}
	var err error
	c.p, err = startProc(c.dir, c.bin, "run", "--config", c.conf(), "--adapter", "caddyfile")
	if err != nil {
		return err
	}
	for _, a := range []string{c.HTTPAddr(), c.HTTPSAddr()} {
		if err := waitServing(a, c.p); err != nil {
			return err
		}
	}
	return nil
}

func (c *caddy) Reload() error {
	out, err := exec.Command(c.bin, "reload", "--config", c.conf(), "--adapter", "caddyfile", "--address", c.admin(), "--force").CombinedOutput()
	if err != nil {
		return fmt.Errorf("caddy reload: %v: %s", err, out)
	}
	return nil
}

func (c *caddy) Stop() { c.p.stop(syscall.SIGTERM, 40*time.Second) }

// PIDs: Caddy's one process serves; it has no master.
func (c *caddy) PIDs() map[string][]int {
	return map[string][]int{"worker": {c.p.cmd.Process.Pid}}
}
