package integration

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// An origin behind baton that serves /public/* to anyone and holds a
// secret at /admin, which the route in front of it never exposes. It
// resolves paths as many application routers do (percent-decoded,
// backslashes as slashes, dot-segments removed) and logs every path it
// serves, resolved.
type origin struct {
	name string
	addr string
	log  func() []string
}

// goOrigin is a Go net/http server: it ends lines at a bare LF and reads
// pipelined requests back to back, as most origins do.
func goOrigin(t *testing.T) origin {
	var mu sync.Mutex
	var served []string
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		p := path.Clean(strings.ReplaceAll(r.URL.Path, "\\", "/"))
		mu.Lock()
		served = append(served, p)
		mu.Unlock()
		if strings.HasPrefix(p, "/admin") {
			io.WriteString(w, "ADMIN-SECRET")
			return
		}
		io.WriteString(w, "public")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return origin{"go", ln.Addr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), served...)
	}}
}

// nodeServer is the same origin on Node's http module (llhttp), the
// other origin that served a smuggled GET /admin behind the old parser.
const nodeServer = `
const http = require('http');
const posix = require('path').posix;
const served = [];
const srv = http.createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    let path = req.url.split('?')[0];
    try { path = decodeURIComponent(path); } catch (e) {}
    path = posix.normalize(path.replace(/\\/g, '/'));
    served.push(path);
    if (path.startsWith('/admin')) { res.end('ADMIN-SECRET'); return; }
    if (path === '/__served') { res.end(JSON.stringify(served)); return; }
    res.end('public');
  });
});
srv.listen(0, '127.0.0.1', () => console.log(srv.address().port));
`

func nodeOrigin(t *testing.T) origin {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the Node origin is not tried (the Go origin is)")
	}
	script := filepath.Join(t.TempDir(), "origin.js")
	if err := os.WriteFile(script, []byte(nodeServer), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, script)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	port, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("node origin: %v", err)
	}
	addr := "127.0.0.1:" + strings.TrimSpace(port)
	return origin{"node", addr, func() []string {
		// Asked directly, not through baton: what did Node serve?
		resp, err := http.Get("http://" + addr + "/__served")
		if err != nil {
			t.Fatalf("node origin: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var paths []string
		for _, p := range strings.Split(strings.Trim(string(b), "[]"), ",") {
			paths = append(paths, strings.Trim(p, `"`))
		}
		return paths
	}}
}

// smuggled is the request each payload tries to slip past the route.
const smuggled = "GET /admin HTTP/1.1\r\nHost: public.example\r\n\r\n"

// smugglingPayloads are the techniques that reached /admin through the
// old HTTP/1.1 path (issue 7), each followed on the same connection by
// an innocent request whose answer must be its own.
var smugglingPayloads = []struct{ name, source, req string }{
	{"CL.TE", "PortSwigger CL.TE (Kettle 2019)",
		fmt.Sprintf("POST /public/x HTTP/1.1\r\nHost: public.example\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n%s", 5+len(smuggled), smuggled)},
	{"TE.CL", "PortSwigger TE.CL (Kettle 2019)",
		fmt.Sprintf("POST /public/x HTTP/1.1\r\nHost: public.example\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(smuggled), smuggled)},
	{"Connection: Content-Length", "issue 7 class 1; hop-by-hop abuse (Davison 2019)",
		fmt.Sprintf("POST /public/x HTTP/1.1\r\nHost: public.example\r\nConnection: Content-Length\r\nContent-Length: %d\r\n\r\n%s", len(smuggled), smuggled)},
	{"Connection: Transfer-Encoding", "issue 7 class 1",
		fmt.Sprintf("POST /public/x HTTP/1.1\r\nHost: public.example\r\nConnection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(smuggled), smuggled)},
	{"bare LF in a value", "issue 7 class 2 (a bare LF ends a line for Go and Node)",
		fmt.Sprintf("GET /public/x HTTP/1.1\r\nHost: public.example\r\nX: a\nContent-Length: %d\r\n\r\n%s", len(smuggled), smuggled)},
	{"bare CR in a value", "issue 7 class 2 (CPython ends a line at a bare CR)",
		fmt.Sprintf("GET /public/x HTTP/1.1\r\nHost: public.example\r\nX: a\rContent-Length: %d\r\n\r\n%s", len(smuggled), smuggled)},
	{"TE with a tab", "defparam/smuggler tabprefix1",
		fmt.Sprintf("POST /public/x HTTP/1.1\r\nHost: public.example\r\nContent-Length: %d\r\nTransfer-Encoding:\tchunked\r\n\r\n0\r\n\r\n%s", 5+len(smuggled), smuggled)},
	{"chunk extension with LF", "HTTP Garden (chunk-ext line terminators)",
		fmt.Sprintf("POST /public/x HTTP/1.1\r\nHost: public.example\r\nTransfer-Encoding: chunked\r\n\r\n2;\n%x\r\nxx\r\n%s\r\n0\r\n\r\n", len(smuggled), smuggled)},
	{"dot-segments", "issue 7 class 4", "GET /public/../admin HTTP/1.1\r\nHost: public.example\r\n\r\n"},
	{"encoded dot-segments", "issue 7 class 4", "GET /public/%2e%2e/admin HTTP/1.1\r\nHost: public.example\r\n\r\n"},
	{"encoded slashes", "issue 7 class 4; Orange Tsai 2018", "GET /public%2f..%2fadmin HTTP/1.1\r\nHost: public.example\r\n\r\n"},
	{"backslashes", "issue 7 class 4; Orange Tsai 2018", "GET /public\\..\\admin HTTP/1.1\r\nHost: public.example\r\n\r\n"},
	{"absolute-form", "issue 7 class 4; RFC 9112 §3.2.2", "GET http://public.example/admin HTTP/1.1\r\nHost: public.example\r\n\r\n"},
}

// TestSmugglingNeverReachesAdmin runs the real binary in front of real
// origins (Go net/http and Node) with a route that exposes /public only,
// and throws every payload at it: no origin serves /admin, no client sees
// the secret, and the innocent request after each payload gets its own
// answer.
func TestSmugglingNeverReachesAdmin(t *testing.T) {
	for _, mk := range []func(*testing.T) origin{goOrigin, nodeOrigin} {
		o := mk(t)
		t.Run(o.name, func(t *testing.T) {
			cfg := fmt.Sprintf(`controlSocket: @DIR@/run/control.sock
listeners:
  - name: web
    address: "127.0.0.1:0"
backends:
  - name: app
    static: [%q]
routes:
  - listener: web
    host: public.example
    pathPrefix: /public
    backend: app
`, o.addr)
			b := startBaton(t, cfg)
			web := b.Address("web")
			for _, p := range smugglingPayloads {
				for _, answer := range exchange(t, web, p.req+"GET /public/next HTTP/1.1\r\nHost: public.example\r\n\r\n") {
					if strings.Contains(answer, "ADMIN-SECRET") {
						t.Errorf("%s (%s): a client got the secret:\n%s", p.name, p.source, answer)
					}
				}
			}
			served := o.log()
			for _, path := range served {
				if strings.HasPrefix(path, "/admin") {
					t.Errorf("the %s origin served /admin; it served %q", o.name, served)
					break
				}
			}
		})
	}
}

// exchange sends raw on a new connection and returns every response read
// until the connection closes or goes quiet.
func exchange(t *testing.T, addr, raw string) []string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, raw)
	br := bufio.NewReader(c)
	var out []string
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return out
		}
		body, _ := io.ReadAll(resp.Body)
		out = append(out, fmt.Sprintf("%d %s", resp.StatusCode, body))
		if resp.Close {
			return out
		}
		// The innocent request is answered last: stop waiting after it.
		if string(body) == "public" && len(out) >= 2 {
			return out
		}
	}
}
