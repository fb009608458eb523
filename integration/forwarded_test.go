package integration

import (
	"bufio"
	"crypto/tls"
	"io"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/baton-proxy/baton/supervisor"
)

// TestTrustedProxies: a client's X-Forwarded-For, -Proto and -Host are
// replaced by baton's own unless the client is in trustedProxies, so a
// client cannot pose as another address (X-Forwarded-For spoofing; the
// same default as Envoy's use_remote_address). After a reload that trusts
// loopback, the chain is kept with the client appended, and the proto and
// host pass, as nginx's $proxy_add_x_forwarded_for. Over HTTP/1.1 and
// HTTP/2.
func TestTrustedProxies(t *testing.T) {
	be := startBackend(t)
	s := newTLSSetup(t)
	cfg := s.config(be, options{}, "")
	b := startBaton(t, cfg)

	seen := func(h2 bool) http.Header {
		t.Helper()
		tr := &http.Transport{TLSClientConfig: s.client("a.example"), ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest("GET", "https://"+b.Address("websecure")+"/headers", nil)
		req.Header.Set("X-Forwarded-For", "203.0.113.9")
		req.Header.Set("X-Forwarded-Proto", "http")
		req.Header.Set("X-Forwarded-Host", "front.example")
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("h2 %t: %v", h2, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		h, err := textproto.NewReader(bufio.NewReader(strings.NewReader(string(body) + "\r\n"))).ReadMIMEHeader()
		if err != nil {
			t.Fatalf("h2 %t: the backend's answer %q: %v", h2, body, err)
		}
		return http.Header(h)
	}
	check := func(h2 bool, xff, proto, host string) {
		t.Helper()
		h := seen(h2)
		if got := h.Get("X-Forwarded-For"); got != xff {
			t.Errorf("h2 %t: X-Forwarded-For %q, want %q", h2, got, xff)
		}
		if got := h.Get("X-Forwarded-Proto"); got != proto {
			t.Errorf("h2 %t: X-Forwarded-Proto %q, want %q", h2, got, proto)
		}
		if got := h.Get("X-Forwarded-Host"); got != host {
			t.Errorf("h2 %t: X-Forwarded-Host %q, want %q", h2, got, host)
		}
	}
	addr := b.Address("websecure")
	for _, h2 := range []bool{false, true} {
		check(h2, "127.0.0.1", "https", addr)
	}

	b.WriteConfig(cfg + "trustedProxies: [127.0.0.1, \"::1\"]\n")
	if h := b.SIGHUP(); h.Outcome != supervisor.OutcomeOK {
		t.Fatalf("reload trusting loopback: %s %s", h.Outcome, h.Reason)
	}
	for _, h2 := range []bool{false, true} {
		check(h2, "203.0.113.9, 127.0.0.1", "http", "front.example")
	}

	b.WriteConfig(cfg + "trustedProxies: [not-an-address]\n")
	if h := b.SIGHUP(); h.Outcome == supervisor.OutcomeOK {
		t.Fatalf("a config with trustedProxies [not-an-address] was taken")
	}
}
