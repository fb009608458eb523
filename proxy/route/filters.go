package route

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/baton-proxy/baton/proxy/h1"
)

// HeaderEdit is a HeaderModifier ready for requests: the field names it
// drops, and the fields it writes, as HTTP/1.1 lines and as name-value
// pairs (names in lower case, for HTTP/2).
type HeaderEdit struct {
	drop  []string // lower case
	lines []byte
	pairs []Field
}

// Field is a header field to write, its name in lower case.
type Field struct{ Name, Value []byte }

func newHeaderEdit(m *HeaderModifier) *HeaderEdit {
	if m == nil || len(m.Set)+len(m.Add)+len(m.Remove) == 0 {
		return nil
	}
	e := &HeaderEdit{}
	dropped := func(name string) {
		name = strings.ToLower(name)
		for _, d := range e.drop {
			if d == name {
				return
			}
		}
		e.drop = append(e.drop, name)
	}
	for _, h := range m.Set {
		dropped(h.Name)
	}
	for _, n := range m.Remove {
		dropped(n)
	}
	for _, list := range [][]Header{m.Set, m.Add} {
		for _, h := range list {
			e.lines = append(e.lines, h.Name...)
			e.lines = append(e.lines, ": "...)
			e.lines = append(e.lines, h.Value...)
			e.lines = append(e.lines, "\r\n"...)
			e.pairs = append(e.pairs, Field{Name: []byte(strings.ToLower(h.Name)), Value: []byte(h.Value)})
		}
	}
	return e
}

// dropping returns e (a new edit when nil) dropping names too, lower
// case.
func (e *HeaderEdit) dropping(names []string) *HeaderEdit {
	if e == nil {
		e = &HeaderEdit{}
	}
	for _, n := range names {
		if !slices.Contains(e.drop, n) {
			e.drop = append(e.drop, n)
		}
	}
	return e
}

// Drops reports whether a field named name is left out.
func (e *HeaderEdit) Drops(name []byte) bool {
	for _, d := range e.drop {
		if len(d) == len(name) && equalFold(name, d) {
			return true
		}
	}
	return false
}

// Lines are the fields to write, each "Name: value\r\n".
func (e *HeaderEdit) Lines() []byte { return e.lines }

// Pairs are the fields to write, names in lower case.
func (e *HeaderEdit) Pairs() []Field { return e.pairs }

func equalFold(b []byte, lower string) bool {
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// ModifyPath appends to dst path as m changes it, matched being the
// prefix the rule matched (for ReplacePrefix). The prefix is replaced by
// whole segments, as the Gateway API's table has it: "/foo" replaced by
// "/xyz" turns "/foo/bar" into "/xyz/bar", by "" or "/" into "/bar"; a
// path left empty is "/".
//
// A Regex modifier's $1 to $9 are the groups of re (the rule's path
// match, Compiled.PathRegexp) in path, empty when a group took nothing;
// "$" followed by anything else is itself.
func ModifyPath(dst []byte, m *PathModifier, matched string, re *regexp.Regexp, path []byte) []byte {
	if m.Regex {
		var idx []int
		if re != nil {
			idx = re.FindSubmatchIndex(path)
		}
		v, start := m.Value, len(dst)
		for i := 0; i < len(v); i++ {
			if v[i] != '$' || i+1 == len(v) || v[i+1] < '1' || v[i+1] > '9' {
				dst = append(dst, v[i])
				continue
			}
			g := int(v[i+1] - '0')
			if 2*g+1 < len(idx) && idx[2*g] >= 0 {
				dst = append(dst, path[idx[2*g]:idx[2*g+1]]...)
			}
			i++
		}
		if len(dst) == start || dst[start] != '/' { // a path begins with '/'
			dst = append(dst, 0)
			copy(dst[start+1:], dst[start:])
			dst[start] = '/'
		}
		return dst
	}
	if !m.ReplacePrefix {
		return append(dst, m.Value...)
	}
	prefix := strings.TrimSuffix(matched, "/")
	rest := path
	if len(rest) >= len(prefix) {
		rest = rest[len(prefix):]
	}
	start := len(dst)
	dst = append(dst, strings.TrimSuffix(m.Value, "/")...)
	dst = append(dst, rest...)
	if len(dst) == start {
		dst = append(dst, '/')
	}
	return dst
}

// Location appends to dst the Location of redirect r for a request: its
// scheme, host (without port), path (already modified by r.Path, when it
// has one) and query (with its '?', or empty), and the port of the
// listener it came on.
func (r *Redirect) Location(dst []byte, scheme string, host []byte, listenerPort int, path, query []byte) []byte {
	port := listenerPort
	if r.Scheme != "" && r.Scheme != scheme {
		switch r.Scheme {
		case "http":
			port = 80
		case "https":
			port = 443
		}
	}
	if r.Scheme != "" {
		scheme = r.Scheme
	}
	if r.Port != 0 {
		port = r.Port
	}
	dst = append(dst, scheme...)
	dst = append(dst, "://"...)
	if r.Hostname != "" {
		dst = append(dst, r.Hostname...)
	} else {
		dst = append(dst, normalizeHostBytes(host)...)
	}
	if !(scheme == "http" && port == 80 || scheme == "https" && port == 443 || port == 0) {
		dst = append(dst, ':')
		dst = strconv.AppendInt(dst, int64(port), 10)
	}
	dst = append(dst, path...)
	if len(query) > 0 && query[0] != '?' {
		dst = append(dst, '?')
	}
	return append(dst, query...)
}

// Status is the redirect's status code.
func (r *Redirect) Status() int {
	if r.StatusCode == 0 {
		return 302
	}
	return r.StatusCode
}

// reserved are the header fields a filter may not write or remove: those
// that frame a message or its connection (a second Content-Length a
// filter wrote would desynchronize the next hop: request or response
// smuggling), Host (a rewrite's hostname changes it), and baton's own
// X-Forwarded-* (trustedProxies decides those).
var reserved = map[string]bool{
	"host": true, "content-length": true, "transfer-encoding": true, "connection": true, "upgrade": true,
	"keep-alive": true, "proxy-connection": true, "te": true, "trailer": true,
	"x-forwarded-for": true, "x-forwarded-proto": true, "x-forwarded-host": true,
}

// Reserved reports whether a filter may not write or remove the header
// field name (any case).
func Reserved(name string) bool { return reserved[strings.ToLower(name)] }

// checkFilters refuses filters that would put bytes on the wire that no
// request or response may carry: the values come from whoever writes
// routes (in Kubernetes, any namespace's owner), and nothing must let one
// inject a header line or split a request line. Header names must be
// tokens; values hold no control character but HTAB and no surrounding
// space; hosts are host names (letters, digits, '-', '.'); paths start
// with '/' and hold only a path's characters (RFC 3986 §3.3, no '?' or
// '#').
func checkFilters[B any](f *Filters[B]) error {
	for _, m := range []*HeaderModifier{f.RequestHeaders, f.ResponseHeaders} {
		if m == nil {
			continue
		}
		for _, h := range append(append([]Header(nil), m.Set...), m.Add...) {
			if !h1.IsToken(h.Name) {
				return fmt.Errorf("header name %q is not a token", h.Name)
			}
			if !validValue(h.Value) {
				return fmt.Errorf("header %s: value %q holds a control character or surrounding space", h.Name, h.Value)
			}
			if Reserved(h.Name) {
				return fmt.Errorf("header %s is baton's to write (framing, Host, X-Forwarded-*): a filter cannot set it", h.Name)
			}
		}
		for _, n := range m.Remove {
			if !h1.IsToken(n) {
				return fmt.Errorf("header name %q is not a token", n)
			}
			if Reserved(n) {
				return fmt.Errorf("header %s is baton's to write (framing, Host, X-Forwarded-*): a filter cannot remove it", n)
			}
		}
	}
	if c := f.CORS; c != nil {
		for _, v := range append([]string{c.AllowMethods, c.AllowHeaders, c.ExposeHeaders}, c.AllowOrigins...) {
			if !validValue(v) {
				return fmt.Errorf("cors: %q holds a control character or surrounding space", v)
			}
		}
		if c.MaxAge < 0 {
			return fmt.Errorf("cors: max age %d", c.MaxAge)
		}
	}
	check := func(what, host string, pm *PathModifier) error {
		if host != "" && !validHost(host) {
			return fmt.Errorf("%s hostname %q is not a host name", what, host)
		}
		if pm != nil && !pm.Regex && !validPath(pm.Value, pm.ReplacePrefix) || pm != nil && pm.Regex && !ValidTemplate(pm.Value) {
			return fmt.Errorf("%s path %q is not a path", what, pm.Value)
		}
		return nil
	}
	if r := f.Redirect; r != nil {
		if r.Scheme != "" && r.Scheme != "http" && r.Scheme != "https" {
			return fmt.Errorf("redirect scheme %q is not http or https", r.Scheme)
		}
		if r.Port < 0 || r.Port > 65535 {
			return fmt.Errorf("redirect port %d", r.Port)
		}
		switch r.StatusCode {
		case 0, 301, 302, 303, 307, 308:
		default:
			return fmt.Errorf("redirect status %d", r.StatusCode)
		}
		if err := check("redirect", r.Hostname, r.Path); err != nil {
			return err
		}
	}
	if r := f.Rewrite; r != nil {
		if err := check("rewrite", r.Hostname, r.Path); err != nil {
			return err
		}
	}
	return nil
}

func validValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return v == strings.TrimSpace(v)
}

func validHost(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return h != ""
}

// validPath reports whether p is an absolute path of RFC 3986 §3.3's
// characters (an empty one, too, for a prefix replacement).
// ValidTemplate reports whether p is a Regex path modifier's value (a
// rewrite target): a path, or one that begins with a group ("$1/x").
func ValidTemplate(p string) bool {
	if strings.HasPrefix(p, "$") {
		p = "/" + p
	}
	return p != "" && validPath(p, false)
}

func validPath(p string, prefix bool) bool {
	if p == "" {
		return prefix
	}
	if p[0] != '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~!$&'()*+,;=:@/%", c) >= 0 {
			continue
		}
		return false
	}
	return true
}
