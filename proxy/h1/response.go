package h1

// Response is a parsed response head, reused like Request.
type Response struct {
	Minor  int
	Status int
	Reason []byte
	// ContentLength is the body's length, or -1 when the response has no
	// Content-Length (then it is chunked, or delimited by the close).
	ContentLength int64
	Chunked       bool
	// Close is set when the backend will close after this response.
	Close  bool
	Fields []Field

	conn connection
}

// NoBody reports whether the response to a request with the given method
// has no body: a response to HEAD, or a 1xx, 204 or 304 (RFC 9112 §6.3).
func (r *Response) NoBody(method []byte) bool {
	return string(method) == "HEAD" || r.Status < 200 || r.Status == 204 || r.Status == 304
}

// Parse parses a response head as strictly as Request.Parse parses a
// request. Every error means the response cannot be relayed: the client
// gets a 502, whatever the error's Status.
func (r *Response) Parse(head []byte) error {
	*r = Response{Fields: r.Fields[:0], conn: r.conn, ContentLength: -1}
	r.conn.reset()
	line, rest, ok := nextLine(head)
	if !ok {
		return errStatusLine
	}
	if err := r.parseStatusLine(line); err != nil {
		return err
	}
	var err error
	if r.Fields, err = parseFields(r.Fields, rest); err != nil {
		return err
	}
	hasTE := false
	for i := range r.Fields {
		f := &r.Fields[i]
		if !isHopByHop(f.Name) {
			continue
		}
		f.drop = true
		switch {
		case EqualFold(f.Name, "content-length"):
			n, ok := parseLength(f.Value)
			switch {
			case !ok:
				return errLengthInvalid
			case r.ContentLength >= 0 && r.ContentLength != n:
				// Equal duplicates are one length (RFC 9110 §8.6),
				// and it is regenerated; different ones are not.
				return errLengthDuplicate
			}
			r.ContentLength = n
		case EqualFold(f.Name, "transfer-encoding"):
			if hasTE {
				return errTEDuplicate
			}
			hasTE = true
			if err := parseTransferEncoding(f.Value); err != nil {
				return err
			}
		case EqualFold(f.Name, "connection"):
			r.conn.add(f.Value)
		}
	}
	if r.conn.tooMany {
		return errConnectionNames
	}
	r.conn.dropNamed(r.Fields)
	if hasTE {
		switch {
		case r.ContentLength >= 0:
			return errTEWithLength // RFC 9112 §6.3 (3): a likely attack
		case r.Minor == 0:
			return errTEInHTTP10 // RFC 9112 §6.1: faulty framing
		}
		r.Chunked = true
	}
	r.Close = r.conn.close || (r.Minor == 0 && !r.conn.keepAlive)
	return nil
}

// parseStatusLine parses "HTTP-version SP status-code SP [reason-phrase]"
// (RFC 9112 §4). A missing SP after the code is tolerated (no reason at
// all); the reason may hold HTAB, SP, VCHAR and obs-text only.
func (r *Response) parseStatusLine(line []byte) error {
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || line[8] != ' ' {
		return errStatusLine
	}
	switch line[7] {
	case '1':
		r.Minor = 1
	case '0':
		r.Minor = 0
	default:
		return errStatusLine
	}
	s := line[9:]
	if !isDigit(s[0]) || !isDigit(s[1]) || !isDigit(s[2]) || s[0] < '1' || s[0] > '5' {
		return errStatusLine
	}
	r.Status = int(s[0]-'0')*100 + int(s[1]-'0')*10 + int(s[2]-'0')
	if len(s) > 3 {
		if s[3] != ' ' {
			return errStatusLine
		}
		r.Reason = s[4:]
		for _, c := range r.Reason {
			if !valueChars[c] {
				return errStatusLine
			}
		}
	}
	return nil
}
