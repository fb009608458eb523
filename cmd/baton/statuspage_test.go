package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// metrics.statusPage local (the default): the page answers clients on
// loopback (a browser on the host, kubectl port-forward) and refuses the
// network's (403), while /metrics and the probes on the same address are
// for everyone; its files keep to themselves (CSP); other paths are 404.
func TestStatusPageLocal(t *testing.T) {
	h := statusPage(nil, true)
	for _, tc := range []struct {
		remote, path string
		code         int
	}{
		{"10.1.2.3:4000", "/", http.StatusForbidden},
		{"10.1.2.3:4000", "/status.json", http.StatusForbidden},
		{"[2001:db8::1]:4000", "/status.js", http.StatusForbidden},
		{"127.0.0.1:4000", "/status.css", http.StatusOK},
		{"[::1]:4000", "/", http.StatusOK},
		{"[::ffff:127.0.0.1]:4000", "/status.js", http.StatusOK},
		{"127.0.0.1:4000", "/etc/passwd", http.StatusNotFound},
	} {
		r := httptest.NewRequest("GET", tc.path, nil)
		r.RemoteAddr = tc.remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.code {
			t.Errorf("%s from %s: %d, want %d", tc.path, tc.remote, w.Code, tc.code)
		}
		if w.Code == http.StatusOK && !strings.Contains(w.Header().Get("Content-Security-Policy"), "default-src 'none'") {
			t.Errorf("%s: no Content-Security-Policy", tc.path)
		}
	}
	r := httptest.NewRequest("GET", "/status.css", nil)
	r.RemoteAddr = "10.1.2.3:4000"
	w := httptest.NewRecorder()
	statusPage(nil, false).ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Errorf("metrics.statusPage on, from the network: %d", w.Code)
	}
}
