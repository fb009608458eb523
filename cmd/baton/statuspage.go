package main

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/netip"

	"github.com/baton-proxy/baton/supervisor"
)

// statusFiles are the status page's: its HTML, script and style. They load
// nothing from elsewhere (an air-gapped cluster sees all of it).
//
//go:embed statuspage/index.html statuspage/status.js statuspage/status.css
var statusFiles embed.FS

// statusPageHeaders keep the page to its own files: no script, style,
// font or frame from elsewhere, no inline script; and the names it shows
// are text in any case (status.js sets textContent only).
func statusPageHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

// statusPage serves the status page at / of the metrics address, and
// status.json, the document `baton status -o json` prints, which the page
// reads every second. local: to clients on loopback only (403 to the
// others: metrics.statusPage local).
func statusPage(sup *supervisor.Supervisor, local bool) http.Handler {
	page, err := fs.Sub(statusFiles, "statuspage")
	if err != nil { // the embedded folder is there: it compiled
		panic(err)
	}
	files := http.FileServerFS(page) // index.html at /, by extension the rest
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if local && !fromLoopback(r) {
			http.Error(w, "the status page answers clients on loopback only (metrics.statusPage: local); kubectl port-forward, or an SSH tunnel, reach it", http.StatusForbidden)
			return
		}
		statusPageHeaders(w.Header())
		switch r.URL.Path {
		case "/status.json":
			ctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
			defer cancel()
			st, ok := sup.StatusContext(ctx)
			if !ok {
				http.Error(w, "the supervisor does not answer", http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(st)
		case "/", "/status.js", "/status.css":
			files.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}

// fromLoopback reports whether r came from a loopback address.
func fromLoopback(r *http.Request) bool {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}
