package h1

import "bytes"

// Request is a parsed request head. Its slices point into the head (in a
// Reader's buffer, valid until the Reader is filled again) or into the
// Request's own storage; a Request is reused from one request to the next.
type Request struct {
	Method []byte
	Minor  int // HTTP/1.Minor
	// Authority is the host[:port] the request is for: the absolute-form
	// target's authority (RFC 9112 §3.2.2: it wins over Host), else the Host
	// field's value; empty when neither says (HTTP/1.0).
	Authority []byte
	// Path is the normalised path (see NormalizePath), or "*".
	Path []byte
	// Query is the query with its '?', as received; empty when none.
	Query []byte
	// ContentLength is the body's length, or -1 when the request has no
	// Content-Length (it has no body unless Chunked).
	ContentLength int64
	// Chunked is set when the body is chunked.
	Chunked bool
	// Close is set when the client asked to close after this request, or
	// speaks HTTP/1.0 without keep-alive.
	Close bool
	// Upgrade is the Upgrade field of a request that asks to switch
	// protocols (Connection: upgrade), else nil.
	Upgrade []byte
	// ExpectContinue is set when the client waits for 100 Continue.
	ExpectContinue bool
	// Fields are the header fields, in order.
	Fields []Field

	asterisk, absolute bool
	fwdProto, fwdHost  []byte // the client's X-Forwarded-Proto and -Host
	conn               connection
	pathBuf, queryBuf  []byte
}

// HasBody reports whether the request has a body.
func (r *Request) HasBody() bool { return r.ContentLength > 0 || r.Chunked }

// MatchPath is the path routes match: the normalised path, or "/" for a
// server-wide OPTIONS *.
func (r *Request) MatchPath() []byte {
	if r.asterisk {
		return slash
	}
	return r.Path
}

// Field returns the value of the first field named name (lower case), or
// nil.
func (r *Request) Field(name string) []byte {
	for i := range r.Fields {
		if EqualFold(r.Fields[i].Name, name) {
			return r.Fields[i].Value
		}
	}
	return nil
}

// Parse parses a request head, as ReadHead returns it, strictly per RFC
// 9112; see docs/security.md for each rule and its source. An error is an
// *Error whose Status is the answer the request gets. r's fields are
// slices of head: head must stay as it is while r is used, and a head
// in a Reader's buffer does not outlive the next read (parse a copy
// before reading a body).
func (r *Request) Parse(head []byte) error {
	*r = Request{Fields: r.Fields[:0], conn: r.conn, pathBuf: r.pathBuf, queryBuf: r.queryBuf, ContentLength: -1}
	r.conn.reset()
	line, rest, ok := nextLine(head)
	if !ok {
		return errRequestLine
	}
	if err := r.parseRequestLine(line); err != nil {
		return err
	}
	var err error
	if r.Fields, err = parseFields(r.Fields, rest); err != nil {
		return err
	}
	var host, te, upgrade []byte
	hasHost := false
	for i := range r.Fields {
		f := &r.Fields[i]
		if isHopByHop(f.Name) || bytes.IndexByte(f.Name, '_') >= 0 {
			// A name with '_' is dropped, as nginx does by default: CGI-
			// style backends read X_Forwarded_For as X-Forwarded-For.
			f.drop = true
		}
		switch len(f.Name) {
		case 4:
			if EqualFold(f.Name, "host") {
				if hasHost {
					return errHostDuplicate
				}
				if !validHost(f.Value) {
					return errHost
				}
				host, hasHost, f.drop = f.Value, true, true
			}
		case 6:
			if EqualFold(f.Name, "expect") {
				r.ExpectContinue = EqualFold(f.Value, "100-continue")
				f.drop = true
			}
		case 7:
			if EqualFold(f.Name, "upgrade") {
				upgrade = f.Value
			}
		case 10:
			if EqualFold(f.Name, "connection") {
				r.conn.add(f.Value)
			}
		case 14:
			if EqualFold(f.Name, "content-length") {
				if r.ContentLength >= 0 {
					return errLengthDuplicate
				}
				n, ok := parseLength(f.Value)
				if !ok {
					return errLengthInvalid
				}
				r.ContentLength = n
			}
		case 16:
			if EqualFold(f.Name, "x-forwarded-host") {
				r.fwdHost, f.drop = f.Value, true
			}
		case 17:
			switch {
			case EqualFold(f.Name, "transfer-encoding"):
				if te != nil {
					return errTEDuplicate
				}
				te = f.Value
				if te == nil {
					te = []byte{}
				}
			case EqualFold(f.Name, "x-forwarded-proto"):
				r.fwdProto, f.drop = f.Value, true
			}
		}
	}
	if r.conn.tooMany {
		return errConnectionNames
	}
	r.conn.dropNamed(r.Fields)
	if te != nil {
		switch {
		case r.ContentLength >= 0:
			return errTEWithLength
		case r.Minor == 0:
			return errTEInHTTP10
		}
		if err := parseTransferEncoding(te); err != nil {
			return err
		}
		r.Chunked = true
	}
	if r.Minor == 1 && !hasHost {
		return errHostMissing
	}
	if !r.absolute {
		r.Authority = host
	}
	r.Close = r.conn.close || (r.Minor == 0 && !r.conn.keepAlive)
	if r.conn.upgrade && upgrade != nil {
		r.Upgrade = upgrade
	}
	return nil
}

// parseRequestLine parses "method SP request-target SP HTTP-version"
// (RFC 9112 §3), with single spaces.
func (r *Request) parseRequestLine(line []byte) error {
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 < 0 {
		return errRequestLine
	}
	method, rest := line[:sp1], line[sp1+1:]
	sp2 := bytes.IndexByte(rest, ' ')
	if sp2 < 0 {
		return errRequestLine
	}
	target, version := rest[:sp2], rest[sp2+1:]
	if !isToken(method) {
		return errMethod
	}
	// HTTP/1.x with x > 1 is served as HTTP/1.1, the highest minor
	// version baton speaks (RFC 9110 §6.2); another major version is 505.
	if len(version) != 8 || string(version[:5]) != "HTTP/" || !isDigit(version[5]) || version[6] != '.' || !isDigit(version[7]) {
		return errVersion
	}
	if version[5] != '1' {
		return errVersionUnknown
	}
	if version[7] != '0' {
		r.Minor = 1
	}
	switch string(method) {
	case "CONNECT", "TRACE":
		return errMethodNotProxy
	}
	r.Method = method
	return r.parseTarget(target, method)
}
