package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readLines returns the lines of path (none when it does not exist yet).
func readLines(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// TestAccessLog: one JSON line per request (200, a 502 from a dead
// backend, a 404, a POST's bytes), a file the supervisor reopens on
// SIGUSR1 after a rotation, and Apache's combined format after a reload.
func TestAccessLog(t *testing.T) {
	be := startBackend(t)
	dead := refusingAddr(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "access.log")
	base := options{workers: 2, reusePort: true}.configYAML(be)
	base = strings.Replace(base, "backends:\n", fmt.Sprintf("backends:\n  - name: dead\n    static: [%q]\n", dead), 1)
	base = strings.Replace(base, "routes:\n  - listener: web\n    pathPrefix: /\n", "routes:\n  - listener: web\n    pathPrefix: /dead\n    backend: dead\n  - listener: web\n    pathPrefix: /app\n", 1)
	cfg := base + fmt.Sprintf("accessLog:\n  path: %q\n  format: json\n", logPath)
	b := startBaton(t, cfg)
	web := "http://" + b.Address("web")
	c := &http.Client{Timeout: 10 * time.Second}
	do := func(method, path, body string) int {
		req, _ := http.NewRequest(method, web+path, strings.NewReader(body))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	want := []struct {
		method, path string
		status       int
		bytesIn      bool
	}{{"GET", "/app/x?q=1", 200, false}, {"POST", "/app/post", 200, true}, {"GET", "/dead/x", 502, false}, {"GET", "/nowhere", 404, false}}
	for _, w := range want {
		body := ""
		if w.bytesIn {
			body = strings.Repeat("b", 1000)
		}
		if s := do(w.method, w.path, body); s != w.status {
			t.Fatalf("%s %s: %d, want %d", w.method, w.path, s, w.status)
		}
	}
	waitFor(t, 10*time.Second, "4 access log lines", func() bool { return len(readLines(logPath)) >= 4 })
	// Each worker writes its lines every 10 ms: lines of different workers
	// need not be in request order.
	byRequest := map[string]string{}
	for _, l := range readLines(logPath) {
		var e map[string]any
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("a line is not JSON: %v\n%s", err, l)
		}
		byRequest[fmt.Sprint(e["method"], " ", e["path"])] = l
	}
	for _, w := range want {
		var e map[string]any
		line := byRequest[w.method+" "+w.path]
		if line == "" {
			t.Fatalf("no line for %s %s in %v", w.method, w.path, byRequest)
		}
		json.Unmarshal([]byte(line), &e)
		if e["method"] != w.method || e["path"] != w.path || e["status"] != float64(w.status) || e["listener"] != "web" || e["client"] != "127.0.0.1" || e["protocol"] != "HTTP/1.1" {
			t.Errorf("%s %s: %s; want %s %s %d", w.method, w.path, line, w.method, w.path, w.status)
		}
		if w.bytesIn && e["bytesIn"].(float64) < 1000 {
			t.Errorf("%s %s: bytesIn %v for a 1000-byte body", w.method, w.path, e["bytesIn"])
		}
		if w.status != 404 && e["backend"] == nil {
			t.Errorf("%s %s: no backend: %s", w.method, w.path, line)
		}
	}

	// logrotate: move the file, SIGUSR1, the next line goes to a new file.
	if err := os.Rename(logPath, logPath+".1"); err != nil {
		t.Fatal(err)
	}
	b.Cmd.Process.Signal(syscall.SIGUSR1)
	waitFor(t, 10*time.Second, "the access log reopened", func() bool {
		_, err := os.Stat(logPath)
		return err == nil
	})
	// The workers switch files once the supervisor's message arrives.
	waitFor(t, 10*time.Second, "a request logged in the new file", func() bool {
		do("GET", "/app/after-rotation", "")
		return len(readLines(logPath)) > 0
	})
	if len(readLines(logPath+".1")) < 4 {
		t.Errorf("the rotated file lost its lines")
	}

	// Combined format after a reload.
	b.WriteConfig(base + fmt.Sprintf("accessLog:\n  path: %q\n  format: combined\n", logPath))
	if out, err := b.Ctl("reload"); err != nil {
		t.Fatalf("reload: %v %s", err, out)
	}
	req, _ := http.NewRequest("GET", web+"/app/combined", nil)
	req.Header.Set("User-Agent", `tester "quoted"`)
	req.Header.Set("Referer", "http://ref.example/")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	combined := regexp.MustCompile(`^127\.0\.0\.1 - - \[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}\] "GET /app/combined HTTP/1\.1" 200 3 "http://ref\.example/" "tester \\"quoted\\""$`)
	deadline := time.Now().Add(10 * time.Second)
	for found := false; !found; {
		for _, l := range readLines(logPath) {
			found = found || combined.MatchString(l)
		}
		if !found && time.Now().After(deadline) {
			t.Fatalf("no combined-format line for the request; the log has:\n%s", strings.Join(readLines(logPath), "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAccessLogTCP: a tcp listener's stream gets one line when it ends,
// with the bytes each way, the backend and endpoint, and no method or path
// (nginx's stream access_log says as much).
func TestAccessLogTCP(t *testing.T) {
	be := startBackend(t)
	logPath := filepath.Join(t.TempDir(), "access.log")
	b := startBaton(t, options{tcp: true}.configYAML(be)+fmt.Sprintf("accessLog:\n  path: %q\n", logPath))
	c, err := net.Dial("tcp", b.Address("echo"))
	if err != nil {
		t.Fatal(err)
	}
	msg := strings.Repeat("e", 100)
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	c.Close()
	waitFor(t, 10*time.Second, "the stream's access log line", func() bool { return len(readLines(logPath)) >= 1 })
	line := readLines(logPath)[0]
	var e map[string]any
	if err := json.Unmarshal([]byte(line), &e); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, line)
	}
	if e["protocol"] != "TCP" || e["listener"] != "echo" || e["status"] != float64(200) || e["bytesIn"] != float64(100) || e["bytesOut"] != float64(100) ||
		e["backend"] != "echo" || e["endpoint"] != be.TCPAddr || e["client"] != "127.0.0.1" || e["method"] != nil || e["upstreamTime"] == nil {
		t.Errorf("stream line: %s", line)
	}
}
