package proxy

import (
	"bytes"
	"sort"
	"strings"

	"github.com/baton-proxy/baton/internal/config"
)

// router holds the compiled routes of every listener. It is built once per
// worker and only read afterwards.
type router struct {
	listeners map[string]*hostTable
}

// hostTable is one listener's routes, by host. A request's host picks the
// most specific group that has a route for its path: the exact host, then
// the longest matching wildcard, then the routes without a host.
type hostTable struct {
	exact     map[string][]*route
	wildcards []wildcard // longest suffix first
	any       []*route
}

type wildcard struct {
	suffix string // ".example.com" for "*.example.com"
	routes []*route
}

// route is one compiled route. Routes in a group are sorted by descending
// prefix length, so the first match is the longest.
type route struct {
	host    string
	prefix  string
	bprefix []byte // prefix, for matching request paths parsed in place
	backend *backend
	maxBody int64 // request body limit; 0: none
	buffer  int64 // request bodies up to this size are read ahead
}

func newRouter(cfg *config.Config, backends map[string]*backend) *router {
	r := &router{listeners: make(map[string]*hostTable)}
	for _, rc := range cfg.Routes {
		t := r.listeners[rc.Listener]
		if t == nil {
			t = &hostTable{exact: make(map[string][]*route)}
			r.listeners[rc.Listener] = t
		}
		rt := &route{
			host: strings.ToLower(rc.Host), prefix: rc.PathPrefix, bprefix: []byte(rc.PathPrefix), backend: backends[rc.Backend],
			maxBody: int64(rc.MaxBodySize), buffer: int64(rc.BufferRequestBody),
		}
		switch {
		case rt.host == "":
			t.any = append(t.any, rt)
		case strings.HasPrefix(rt.host, "*."):
			t.addWildcard(rt.host[1:], rt)
		default:
			t.exact[rt.host] = append(t.exact[rt.host], rt)
		}
	}
	for _, t := range r.listeners {
		for _, routes := range t.exact {
			sortRoutes(routes)
		}
		for _, w := range t.wildcards {
			sortRoutes(w.routes)
		}
		sort.SliceStable(t.wildcards, func(i, j int) bool { return len(t.wildcards[i].suffix) > len(t.wildcards[j].suffix) })
		sortRoutes(t.any)
	}
	return r
}

func (t *hostTable) addWildcard(suffix string, rt *route) {
	for i := range t.wildcards {
		if t.wildcards[i].suffix == suffix {
			t.wildcards[i].routes = append(t.wildcards[i].routes, rt)
			return
		}
	}
	t.wildcards = append(t.wildcards, wildcard{suffix: suffix, routes: []*route{rt}})
}

func sortRoutes(rs []*route) {
	sort.SliceStable(rs, func(i, j int) bool { return len(rs[i].prefix) > len(rs[j].prefix) })
}

// match returns the route for a request to host (as the Host header has it)
// and path on listener, or nil.
func (r *router) match(listener, host, path string) *route {
	t := r.listeners[listener]
	if t == nil {
		return nil
	}
	host = normalizeHost(host)
	if rt := firstPrefix(t.exact[host], path); rt != nil {
		return rt
	}
	for _, w := range t.wildcards {
		if len(host) > len(w.suffix) && strings.HasSuffix(host, w.suffix) {
			if rt := firstPrefix(w.routes, path); rt != nil {
				return rt
			}
		}
	}
	return firstPrefix(t.any, path)
}

// matchBytes is match for a request head parsed in place: host and path
// are the raw bytes, not copied.
func (r *router) matchBytes(listener string, host, path []byte) *route {
	t := r.listeners[listener]
	if t == nil {
		return nil
	}
	host = normalizeHostBytes(host)
	if needsLower(host) {
		return r.match(listener, string(host), string(path))
	}
	if rt := firstPrefixBytes(t.exact[string(host)], path); rt != nil {
		return rt
	}
	for _, w := range t.wildcards {
		if len(host) > len(w.suffix) && string(host[len(host)-len(w.suffix):]) == w.suffix {
			if rt := firstPrefixBytes(w.routes, path); rt != nil {
				return rt
			}
		}
	}
	return firstPrefixBytes(t.any, path)
}

func firstPrefixBytes(rs []*route, path []byte) *route {
	for _, rt := range rs {
		if bytes.HasPrefix(path, rt.bprefix) {
			return rt
		}
	}
	return nil
}

func normalizeHostBytes(h []byte) []byte {
	if i := bytes.LastIndexByte(h, ':'); i >= 0 && !bytes.HasSuffix(h, []byte("]")) {
		h = h[:i]
	}
	if len(h) > 0 && h[len(h)-1] == '.' {
		h = h[:len(h)-1]
	}
	return h
}

func needsLower(h []byte) bool {
	for _, c := range h {
		if 'A' <= c && c <= 'Z' {
			return true
		}
	}
	return false
}

func firstPrefix(rs []*route, path string) *route {
	for _, rt := range rs {
		if strings.HasPrefix(path, rt.prefix) {
			return rt
		}
	}
	return nil
}

// normalizeHost strips the port and a trailing dot and lowercases, without
// allocating when the host is already plain.
func normalizeHost(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
		h = h[:i]
	}
	h = strings.TrimSuffix(h, ".")
	for i := 0; i < len(h); i++ {
		if c := h[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(h)
		}
	}
	return h
}
