package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

const minimal = `
listeners:
  - name: web
    address: 127.0.0.1:8080
backends:
  - name: app
    static: ["127.0.0.1:9000"]
routes:
  - listener: web
    backend: app
`

func TestDefaults(t *testing.T) {
	c, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if c.ReadyTimeout.Std() != DefaultReadyTimeout || c.DrainTimeout.Std() != DefaultDrainTimeout || c.Workers != DefaultWorkers {
		t.Errorf("timeouts/workers not defaulted: %+v", c)
	}
	if c.Listeners[0].Protocol != ProtocolHTTP || c.Routes[0].PathPrefix != "/" || c.Backends[0].ConnectTimeout.Std() != DefaultConnectTimeout {
		t.Errorf("listener/route/backend not defaulted: %+v %+v %+v", c.Listeners[0], c.Routes[0], c.Backends[0])
	}
	if !strings.HasPrefix(c.ControlSocket, "/") {
		t.Errorf("control socket %q", c.ControlSocket)
	}
}

func TestContractExample(t *testing.T) {
	// The example of the contract, key for key.
	c, err := Parse([]byte(`
controlSocket: /tmp/x/control.sock
readyTimeout: 10s
drainTimeout: 30s
workers: 2
listeners:
  - name: web
    address: 127.0.0.1:8080
    protocol: http
    reusePort: true
    sockets: 2
backends:
  - name: app
    static: ["127.0.0.1:9000", "127.0.0.1:9001"]
routes:
  - listener: web
    host: ""
    pathPrefix: /
    backend: app
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Workers != 2 || c.Listeners[0].Sockets != 2 || !c.Listeners[0].ReusePort || c.ReadyTimeout.Std() != 10*time.Second || len(c.Backends[0].Static) != 2 {
		t.Errorf("parsed %+v", c)
	}
}

// The ingress section's contract (issue 22): `ingress: {}` serves on
// 0.0.0.0:80 and 0.0.0.0:443 and needs no listeners of its own.
func TestIngressDefaults(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Parse([]byte("kubernetes: {kubeconfig: " + kc + "}\ningress: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Ingress.Address != "0.0.0.0:80" || c.Ingress.TLSAddress != "0.0.0.0:443" || c.Ingress.PublishService != "" {
		t.Errorf("ingress: %+v", c.Ingress)
	}
}

func TestRejects(t *testing.T) {
	for _, tt := range []struct {
		name, yaml, want string
	}{
		{"unknown key", minimal + "workerz: 2\n", "workerz"},
		{"canary duration too short", minimal + "canary:\n  duration: 10ms\n", "canary.duration must be at least 1s"},
		{"canary ratio below 1", minimal + "canary:\n  duration: 5m\n  maxErrorRatio: 0.5\n", "canary.maxErrorRatio must be at least 1"},
		{"bad duration", minimal + "drainTimeout: 30\n", "duration must be a string"},
		{"negative duration", minimal + "readyTimeout: -1s\n", "negative"},
		{"no listeners", "backends: []\n", "no listeners"},
		{"workers", minimal + "workers: 1000\n", "workers must be between"},
		{"route to nowhere", strings.Replace(minimal, "backend: app", "backend: nope", 1), `backend "nope" is not defined`},
		{"route on no listener", strings.Replace(minimal, "listener: web", "listener: nope", 1), `listener "nope" is not defined`},
		{"listener without route", strings.Replace(minimal, "backends:", "  - name: api\n    address: 127.0.0.1:8081\nbackends:", 1), `listener "api" has no route`},
		{"bad address", strings.Replace(minimal, "127.0.0.1:8080", "localhost", 1), "want host:port"},
		{"bad port", strings.Replace(minimal, "127.0.0.1:8080", "127.0.0.1:99999", 1), "port"},
		{"sockets without reusePort", strings.Replace(minimal, "address: 127.0.0.1:8080", "address: 127.0.0.1:8080\n    sockets: 2", 1), "needs reusePort"},
		{"bad protocol", strings.Replace(minimal, "address: 127.0.0.1:8080", "address: 127.0.0.1:8080\n    protocol: udp", 1), "protocol must be"},
		{"idleTimeout on an http listener", strings.Replace(minimal, "address: 127.0.0.1:8080", "address: 127.0.0.1:8080\n    idleTimeout: 1m", 1), "idleTimeout is for tcp listeners"},
		{"bad backend protocol", strings.Replace(minimal, `static: ["127.0.0.1:9000"]`, `static: ["127.0.0.1:9000"]`+"\n    protocol: http3", 1), "protocol must be http1, h2c or h2"},
		{"h2 without tls", strings.Replace(minimal, `static: ["127.0.0.1:9000"]`, `static: ["127.0.0.1:9000"]`+"\n    protocol: h2", 1), "protocol h2 is HTTP/2 over TLS"},
		{"h2c with tls", strings.Replace(minimal, `static: ["127.0.0.1:9000"]`, `static: ["127.0.0.1:9000"]`+"\n    protocol: h2c\n    tls: {}", 1), "protocol h2c is HTTP/2 without TLS"},
		{"empty static", strings.Replace(minimal, `static: ["127.0.0.1:9000"]`, "static: []", 1), "at least one address"},
		{"bad static", strings.Replace(minimal, `"127.0.0.1:9000"`, `"nohost"`, 1), "want host:port"},
		{"prefix without slash", strings.Replace(minimal, "backend: app\n", "backend: app\n    pathPrefix: api\n", 1), "must start with /"},
		{"duplicate route", minimal + "  - listener: web\n    backend: app\n", "matches the same requests as routes[0]"},
		{"path and pathPrefix", minimal + "  - listener: web\n    backend: app\n    pathPrefix: /a\n    path: {value: /a}\n", "pathPrefix and path"},
		{"bad path type", minimal + "  - listener: web\n    backend: app\n    path: {type: Suffix, value: /a}\n", "path.type must be"},
		{"bad path regex", minimal + "  - listener: web\n    backend: app\n    path: {type: RegularExpression, value: \"/([\"}\n", "path.value"},
		{"path not normal", minimal + "  - listener: web\n    backend: app\n    path: {value: /a/../b}\n", "not in normal form"},
		{"bad header regex", minimal + "  - listener: web\n    backend: app\n    headers: [{name: x, value: \"(\", type: RegularExpression}]\n", "headers[0]: value"},
		{"bad header name", minimal + "  - listener: web\n    backend: app\n    headers: [{name: \"x y\", value: v}]\n", "not a field name"},
		{"bad method", minimal + "  - listener: web\n    backend: app\n    method: \"GE T\"\n", "not a token"},
		{"backend and backends", minimal + "  - listener: web\n    backend: app\n    method: GET\n    backends: [{name: app}]\n", "one or the other"},
		{"weight too large", minimal + "  - listener: web\n    method: GET\n    backends: [{name: app, weight: 1000001}]\n", "weight must be"},
		{"backends to nowhere", minimal + "  - listener: web\n    method: GET\n    backends: [{name: app}, {name: nope}]\n", `backends[1]: backend "nope" is not defined`},
		{"no backend", minimal + "  - listener: web\n    method: GET\n", "no backend"},
		{"redirect with backend", minimal + "  - listener: web\n    method: GET\n    backend: app\n    redirect: {scheme: https}\n", "redirects sends nowhere"},
		{"redirect and rewrite", minimal + "  - listener: web\n    method: GET\n    redirect: {scheme: https}\n    rewrite: {hostname: b}\n", "one or the other"},
		{"bad redirect scheme", minimal + "  - listener: web\n    method: GET\n    redirect: {scheme: ftp}\n", "redirect.scheme"},
		{"bad redirect status", minimal + "  - listener: web\n    method: GET\n    redirect: {statusCode: 200}\n", "redirect.statusCode"},
		{"two path modifiers", minimal + "  - listener: web\n    method: GET\n    backend: app\n    rewrite: {path: {replaceFullPath: /a, replacePrefixMatch: /b}}\n", "one of replaceFullPath"},
		{"prefix modifier without prefix", minimal + "  - listener: web\n    backend: app\n    path: {type: Exact, value: /a}\n    rewrite: {path: {replacePrefixMatch: /b}}\n", "needs a prefix"},
		{"filter on framing", minimal + "  - listener: web\n    method: GET\n    backend: app\n    requestHeaders: {set: [{name: Content-Length, value: \"0\"}]}\n", "baton's to write"},
		{"filter on xff", minimal + "  - listener: web\n    method: GET\n    backend: app\n    responseHeaders: {remove: [X-Forwarded-For]}\n", "baton's to write"},
		{"relative control socket", minimal + "controlSocket: run/ctl.sock\n", "absolute"},
		{"bad trusted proxy", minimal + "trustedProxies: [10.0.0.0/8, proxy.example]\n", `"proxy.example" is not a CIDR`},
		{"grace over drain", minimal + "drainTimeout: 1s\nhttp:\n  drainIdleGrace: 2s\n", "shorter than drainTimeout"},
		{"ingress bad address", "kubernetes: {kubeconfig: /k}\ningress: {address: nohost}\n", `ingress.address: "nohost" is not an IP address and port`},
		{"ingress one address twice", "kubernetes: {kubeconfig: /k}\ningress: {address: \"0.0.0.0:80\", tlsAddress: \"0.0.0.0:80\"}\n", "address and tlsAddress are both"},
		{"ingress bad publishService", "kubernetes: {kubeconfig: /k}\ningress: {publishService: baton}\n", `ingress.publishService: "baton" is not namespace/name`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse = %v, want ErrInvalid mentioning %q", err, tt.want)
			}
		})
	}
}

func TestTCPListenerRoutes(t *testing.T) {
	base := `
listeners:
  - name: db
    address: "[::1]:5432"
    protocol: tcp
backends:
  - name: pg
    static: ["[::1]:15432"]
routes:
  - listener: db
    backend: pg
`
	c, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if n, a, _ := c.Listeners[0].Network(); n != "tcp6" || a != "[::1]:5432" || c.Routes[0].PathPrefix != "" {
		t.Errorf("network %s %s, prefix %q", n, a, c.Routes[0].PathPrefix)
	}
	// A silent stream is closed after nginx's proxy_timeout by default.
	if got := c.Listeners[0].IdleTimeout.Std(); got != DefaultStreamIdleTimeout {
		t.Errorf("a tcp listener's idleTimeout: %v, want %v", got, DefaultStreamIdleTimeout)
	}
	// As every other duration, at least 1ms (a negative one the parser
	// refuses).
	withIdle := func(d string) string {
		return strings.Replace(base, "protocol: tcp", "protocol: tcp\n    idleTimeout: "+d, 1)
	}
	if _, err := Parse([]byte(withIdle("500us"))); err == nil || !strings.Contains(err.Error(), "idleTimeout must be at least 1ms") {
		t.Errorf("a tcp listener's idleTimeout 500us: %v", err)
	}
	if c, err := Parse([]byte(withIdle("1ms"))); err != nil || c.Listeners[0].IdleTimeout.Std() != time.Millisecond {
		t.Errorf("a tcp listener's idleTimeout 1ms: %v", err)
	}
	if _, err := Parse([]byte(base + "  - listener: db\n    backend: pg\n")); err == nil || !strings.Contains(err.Error(), "tcp and already has a route") {
		t.Errorf("second tcp route: %v", err)
	}
	if _, err := Parse([]byte(strings.Replace(base, "backend: pg\n", "backend: pg\n    pathPrefix: /x\n", 1))); err == nil || !strings.Contains(err.Error(), "no path, matches") {
		t.Errorf("tcp route with a path: %v", err)
	}
	if _, err := Parse([]byte(strings.Replace(base, "backend: pg\n", "backend: pg\n    host: db.example\n", 1))); err == nil || !strings.Contains(err.Error(), "a host needs tls.mode passthrough") {
		t.Errorf("tcp route with a host, without passthrough: %v", err)
	}
}

// A tcp listener with tls.mode passthrough (issue 24) routes TLS by the
// ClientHello's server name: its routes may name hosts (exact or "*."),
// several of them, one without host for the rest; it holds no key, so
// certificates and the like are refused; an http listener cannot pass
// TLS through (it must read requests).
func TestTLSPassthroughListener(t *testing.T) {
	base := `
listeners:
  - name: tls
    address: "127.0.0.1:8443"
    protocol: tcp
    tls: {mode: passthrough}
backends:
  - {name: a, static: ["127.0.0.1:9001"]}
  - {name: b, static: ["127.0.0.1:9002"]}
  - {name: rest, static: ["127.0.0.1:9003"]}
routes:
  - {listener: tls, host: a.example, backend: a}
  - {listener: tls, hostnames: ["*.b.example"], backend: b}
  - {listener: tls, backend: rest}
`
	c, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Listeners[0].TLS.Passthrough() {
		t.Error("tls.mode passthrough not read")
	}
	for _, tc := range []struct{ what, from, to, want string }{
		{"a certificate", "tls: {mode: passthrough}", "tls: {mode: passthrough, certificates: [{certFile: /c, keyFile: /k}]}", "holds no key"},
		{"an unknown mode", "mode: passthrough", "mode: sideways", "terminate or passthrough"},
		{"an http listener", "protocol: tcp", "protocol: http", "needs protocol tcp"},
		{"a host with a port", "host: a.example", "host: a.example:443", "without port"},
	} {
		if _, err := Parse([]byte(strings.Replace(base, tc.from, tc.to, 1))); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.what, err, tc.want)
		}
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	c, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	d, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if d.DrainTimeout != c.DrainTimeout || !reflect.DeepEqual(d.Routes, c.Routes) || d.ControlSocket != c.ControlSocket {
		t.Errorf("round trip %+v != %+v", d, c)
	}
}

func TestLoadTooLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, []byte(minimal+"#"+strings.Repeat("x", MaxSize)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Load = %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
}

// TestFiles: the files a config names for baton to read, for watch.
func TestFiles(t *testing.T) {
	c := &Config{
		Listeners: []Listener{
			{Name: "plain"},
			{Name: "secure", TLS: &ListenerTLS{
				Certificates: []Certificate{{CertFile: "/a.crt", KeyFile: "/a.key"}, {CertFile: "/b.crt", KeyFile: "/b.key"}},
				ClientCA:     "/ca.pem",
			}},
		},
		Kubernetes: Kubernetes{Kubeconfig: "/kubeconfig"},
	}
	want := []string{"/a.crt", "/a.key", "/b.crt", "/b.key", "/ca.pem", "/kubeconfig"}
	if got := c.Files(); !slices.Equal(got, want) {
		t.Errorf("Files() = %v, want %v", got, want)
	}
}
