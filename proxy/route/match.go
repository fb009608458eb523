package route

import (
	"bytes"
	"net/url"
)

// matches reports whether req meets every condition of e.
func (e *entry[B]) matches(req *Request) bool {
	if !e.pathMatches(req.Path) {
		return false
	}
	if e.method != nil && !bytes.Equal(e.method, req.Method) {
		return false
	}
	for i := range e.header {
		h := &e.header[i]
		v := req.Fields.Field(h.name)
		if v == nil || !h.valueMatches(v) {
			return false
		}
	}
	for i := range e.query {
		q := &e.query[i]
		v, ok := queryValue(req.Query, q.name)
		if !ok || !q.valueMatches(v) {
			return false
		}
	}
	return true
}

func (e *entry[B]) pathMatches(path []byte) bool {
	switch e.path.Type {
	case PathExact:
		return bytes.Equal(path, e.bpath)
	case PathRegex:
		return e.re.Match(path)
	case PathStringPrefix:
		return bytes.HasPrefix(path, e.bpath)
	}
	// PathPrefix: by whole segments.
	v := e.bpath
	if len(v) == 1 { // "/"
		return len(path) > 0 && path[0] == '/'
	}
	return bytes.HasPrefix(path, v) && (len(path) == len(v) || path[len(v)] == '/')
}

func (c *compiledValue) valueMatches(v []byte) bool {
	if c.re != nil {
		return c.re.Match(v)
	}
	return bytes.Equal(v, c.value)
}

// queryValue returns the value of the first query parameter named name in
// the raw query q (with or without its '?'), decoded (RFC 3986 percent
// encoding, '+' as a space, as HTML forms and Go's url.ParseQuery have
// it).
func queryValue(q []byte, name string) ([]byte, bool) {
	if len(q) > 0 && q[0] == '?' {
		q = q[1:]
	}
	for len(q) > 0 {
		var pair []byte
		if i := bytes.IndexByte(q, '&'); i >= 0 {
			pair, q = q[:i], q[i+1:]
		} else {
			pair, q = q, nil
		}
		k, v := pair, []byte(nil)
		if i := bytes.IndexByte(pair, '='); i >= 0 {
			k, v = pair[:i], pair[i+1:]
		}
		if !equalDecoded(k, name) {
			continue
		}
		if bytes.IndexByte(v, '%') < 0 && bytes.IndexByte(v, '+') < 0 {
			return v, true
		}
		d, err := url.QueryUnescape(string(v))
		if err != nil {
			return v, true // not valid encoding: compared as it came
		}
		return []byte(d), true
	}
	return nil, false
}

// equalDecoded reports whether the raw query key k, decoded, is name.
func equalDecoded(k []byte, name string) bool {
	if bytes.IndexByte(k, '%') < 0 && bytes.IndexByte(k, '+') < 0 {
		return string(k) == name
	}
	d, err := url.QueryUnescape(string(k))
	return err == nil && d == name
}
