package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/certs"
	"github.com/baton-proxy/baton/integration/internal/harness"
	"github.com/baton-proxy/baton/integration/internal/load"
	"github.com/baton-proxy/baton/supervisor"
)

// secretVolume lays files out as the kubelet does a Secret volume
// (pkg/volume/util/atomic_writer.go): each key a symlink through ..data,
// ..data a symlink to a timestamped directory, and an update a new
// directory that a rename of ..data_tmp over ..data makes current.
type secretVolume struct {
	t   *testing.T
	dir string
	n   int
}

func newSecretVolume(t *testing.T, files map[string][]byte) *secretVolume {
	v := &secretVolume{t: t, dir: t.TempDir()}
	v.update(files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(v.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// update writes a new version of the files and swaps ..data to it.
func (v *secretVolume) update(files map[string][]byte) {
	v.n++
	version := fmt.Sprintf("..2026_12_01_00_00_%02d.%d", v.n, v.n)
	if err := os.Mkdir(filepath.Join(v.dir, version), 0o755); err != nil {
		v.t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(v.dir, version, name), b, 0o600); err != nil {
			v.t.Fatal(err)
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
}

// TestWatchRotatesCertificates: with watch: true, a certificate rotated
// the way Kubernetes updates a mounted Secret is served after a handoff
// baton starts itself, under HTTPS load (new connections and keep-alive)
// with no failed request; a rotation to a key that does not match is
// refused while the running generation serves on; a change to the config
// file, rewritten in place, is a reload too, and so are certificate files
// rewritten in place.
func TestWatchRotatesCertificates(t *testing.T) {
	be := startBackend(t)
	ca := certs.NewCA(t, "baton test CA")
	issue := func(serial int64) map[string][]byte {
		c, k := ca.Issue(t, []string{"a.example"}, certs.Options{SerialNum: serial})
		return map[string][]byte{"tls.crt": c, "tls.key": k}
	}
	vol := newSecretVolume(t, issue(1001))
	cfg := "watch: true\n" + options{}.configYAML(be)
	cfg = strings.Replace(cfg, "listeners:\n", fmt.Sprintf(`listeners:
  - name: websecure
    address: "127.0.0.1:0"
    protocol: http
    tls:
      certificates:
        - {certFile: %q, keyFile: %q}
`, filepath.Join(vol.dir, "tls.crt"), filepath.Join(vol.dir, "tls.key")), 1)
	cfg += "  - listener: websecure\n    pathPrefix: /\n    backend: app\n"
	b := startBaton(t, cfg)
	addr := b.Address("websecure")

	serial := func() int64 {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, ServerName: "a.example"})
		if err != nil {
			t.Fatalf("TLS dial: %v", err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	// handoff waits for the next handoff after the last one seen.
	seen := len(b.Status().Handoffs)
	handoff := func(what string) supervisor.Handoff {
		t.Helper()
		var h supervisor.Handoff
		waitFor(t, 30*time.Second, what+": a handoff decided", func() bool {
			hs := b.Status().Handoffs
			if len(hs) <= seen {
				return false
			}
			h = hs[len(hs)-1]
			return h.Outcome != ""
		})
		seen = len(b.Status().Handoffs)
		if h.Trigger != "watch" {
			t.Errorf("%s: handoff trigger %q, want watch", what, h.Trigger)
		}
		return h
	}

	var progress atomic.Uint64
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan *load.Result, 1)
	go func() {
		done <- load.Run(ctx, load.Config{
			HTTPAddr:  addr,
			Host:      "a.example",
			Duration:  5 * time.Minute,
			KeepAlive: 2,
			NewConn:   2,
			Progress:  &progress,
			TLS:       &tls.Config{RootCAs: ca.Pool, ServerName: "a.example"},
		})
	}()
	harness.WaitTraffic(t, &progress, 200)

	if got := serial(); got != 1001 {
		t.Fatalf("serial %d at start, want 1001", got)
	}
	vol.update(issue(1002))
	if h := handoff("rotation"); h.Outcome != supervisor.OutcomeOK {
		t.Fatalf("rotation: %s %s", h.Outcome, h.Reason)
	}
	if got := serial(); got != 1002 {
		t.Errorf("serial %d after the rotation, want 1002", got)
	}
	harness.WaitTraffic(t, &progress, 200)

	bad := issue(1003)
	bad["tls.key"] = issue(1004)["tls.key"]
	vol.update(bad)
	if h := handoff("mismatched key"); h.Outcome != supervisor.OutcomeRefused || !strings.Contains(h.Reason, "tls certificate") {
		t.Errorf("mismatched key: %s %q, want refused for the certificate", h.Outcome, h.Reason)
	}
	harness.WaitTraffic(t, &progress, 200)
	if got := serial(); got != 1002 {
		t.Errorf("serial %d after a refused rotation, want 1002 still", got)
	}

	vol.update(issue(1005))
	if h := handoff("fixed rotation"); h.Outcome != supervisor.OutcomeOK {
		t.Fatalf("fixed rotation: %s %s", h.Outcome, h.Reason)
	}
	if got := serial(); got != 1005 {
		t.Errorf("serial %d after the fixed rotation, want 1005", got)
	}

	// The config rewritten in place, now naming plain files: the next
	// rotation rewrites them in place too, certificate then key (one
	// reload: the debounce).
	plain := t.TempDir()
	crt, key := filepath.Join(plain, "a.crt"), filepath.Join(plain, "a.key")
	files := issue(1006)
	os.WriteFile(crt, files["tls.crt"], 0o644)
	os.WriteFile(key, files["tls.key"], 0o600)
	cfg2 := strings.NewReplacer("workers: 1", "workers: 2",
		filepath.Join(vol.dir, "tls.crt"), crt, filepath.Join(vol.dir, "tls.key"), key).Replace(cfg)
	b.WriteConfig(cfg2)
	if h := handoff("config rewritten"); h.Outcome != supervisor.OutcomeOK {
		t.Fatalf("config rewritten: %s %s", h.Outcome, h.Reason)
	}
	if n := len(b.ActiveWorkers()); n != 2 {
		t.Errorf("%d workers after the config change, want 2", n)
	}
	if got := serial(); got != 1006 {
		t.Errorf("serial %d after the config change, want 1006", got)
	}
	harness.WaitTraffic(t, &progress, 200)
	files = issue(1007)
	os.WriteFile(crt, files["tls.crt"], 0o644)
	os.WriteFile(key, files["tls.key"], 0o600)
	if h := handoff("files rewritten in place"); h.Outcome != supervisor.OutcomeOK {
		t.Fatalf("files rewritten in place: %s %s", h.Outcome, h.Reason)
	}
	if got := serial(); got != 1007 {
		t.Errorf("serial %d after rewriting the files, want 1007", got)
	}
	harness.WaitTraffic(t, &progress, 200)

	stop()
	res := <-done
	t.Logf("under load: %s", res)
	if n := res.TotalFailures(); n != 0 || res.Requests == 0 {
		t.Errorf("%d failed requests: %v; first: %q", n, res.Failures, res.Examples)
	}
}
