package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-proxy/baton/supervisor"
)

// chromium returns the path of headless Chromium (Debian's package, which
// make testdeps installs).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium: make testdeps installs Debian's (apt-get install chromium)")
	return ""
}

// browse runs headless Chromium on url with args (--dump-dom,
// --screenshot=FILE), the page's script run for a few seconds of virtual
// time, and returns what it printed.
func browse(t *testing.T, url string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium(t), append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir(), "--window-size=1000,1200", "--virtual-time-budget=4000"}, append(args, url)...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return stdout.Bytes()
}

// The status page (issue 25) as an operator opens it during a reload
// under load: a real browser loads it from the metrics address while the
// old generation drains its slow requests, and its DOM has both
// generations, on the time line and in the table, in their states; a
// screenshot shows them (kept in the test's log). A backend named with
// HTML in it shows as text, escaped. The page loads nothing from
// elsewhere (its Content-Security-Policy says so).
func TestStatusPageInBrowser(t *testing.T) {
	be := startBackend(t)
	maddr := freePort(t)
	evil := `<img src=x onerror="document.title='owned'">`
	cfg := strings.NewReplacer(
		"backends:\n", fmt.Sprintf("backends:\n  - name: %q\n    static: [%q]\n", evil, be.HTTPAddr),
		"routes:\n", fmt.Sprintf("routes:\n  - listener: web\n    pathPrefix: /evil\n    backend: %q\n", evil),
	).Replace(options{workers: 2, reusePort: true}.configYAML(be)) + fmt.Sprintf("metrics:\n  address: %s\n", maddr)
	b := startBaton(t, cfg)
	stop := background(t, b, false)
	web := b.Address("web")
	getOK(t, http.DefaultClient, "http://"+web+"/evil")

	// Slow requests keep the old generation draining after the reload.
	var slow sync.WaitGroup
	for range 3 {
		slow.Go(func() {
			resp, err := http.Get("http://" + web + "/sleep/12s")
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	waitFor(t, 10*time.Second, "the slow requests in flight", func() bool { return be.InFlight.Load() >= 3 })
	old := b.Status().ActiveGeneration
	h := b.SIGHUP()
	if h.Outcome != supervisor.OutcomeOK {
		t.Fatalf("reload: %s %s", h.Outcome, h.Reason)
	}
	url := "http://" + maddr + "/"
	dom := string(browse(t, url, "--dump-dom"))
	shot := filepath.Join(t.TempDir(), "statuspage.png")
	browse(t, url, "--screenshot="+shot)

	for _, want := range []string{
		fmt.Sprintf(`<g data-generation="%d" data-state="draining" class="generation">`, old),
		fmt.Sprintf(`<g data-generation="%d" data-state="active" class="generation">`, h.To),
		fmt.Sprintf(`<tr data-generation="%d" data-state="draining">`, old),
		fmt.Sprintf(`<tr data-generation="%d" data-state="active">`, h.To),
		`data-loaded="true"`,
		`&lt;img src=x onerror="document.title='owned'"&gt;`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the page's DOM lacks %s", want)
		}
	}
	if strings.Contains(dom, "<img") || strings.Contains(dom, "<title>owned</title>") {
		t.Errorf("a backend's name became markup:\n%s", dom)
	}
	if png, err := os.ReadFile(shot); err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) || len(png) < 10000 {
		t.Errorf("screenshot: %d bytes, %v", len(png), err)
	} else {
		t.Logf("screenshot of the page during the handoff %d -> %d: %s", old, h.To, shot)
	}

	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("Content-Security-Policy %q: want the page's own files only", csp)
	}
	slow.Wait()
	noFailures(t, stop())
}
