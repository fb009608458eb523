package route

import (
	"strconv"
	"strings"
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
func ModifyPath(dst []byte, m *PathModifier, matched string, path []byte) []byte {
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
