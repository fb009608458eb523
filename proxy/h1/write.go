package h1

import (
	"bufio"
	"strconv"
)

// Framing says how a body is delimited on its way out.
type Framing struct {
	// Length is the Content-Length to send, or -1 for none.
	Length int64
	// Chunked sends Transfer-Encoding: chunked.
	Chunked bool
}

// Forwarded is what a proxy adds to a request it forwards.
type Forwarded struct {
	// For is the client's address, appended to X-Forwarded-For.
	For []byte
	// Proto is the scheme the client used, sent as X-Forwarded-Proto.
	Proto string
	// Host is sent as Host when the request named no authority (an
	// HTTP/1.0 request without Host): the upstream's address, as nginx's
	// $proxy_host.
	Host string
	// Trusted says the client is a proxy baton trusts (trustedProxies):
	// its X-Forwarded-For chain is kept (For appended) and its
	// X-Forwarded-Proto and -Host are passed on. From anyone else, they
	// are replaced.
	Trusted bool
	// Edit, when set, changes the request's fields on the way (a route's
	// header filter). It cannot touch what frames the message, Host or
	// the protocol switch: those are written after it decides.
	Edit FieldEdit
	// Path and Authority, when set, replace the request's path and Host
	// (a route's URL rewrite); X-Forwarded-Host keeps the client's.
	Path, Authority []byte
}

// FieldEdit changes the fields a head goes out with: it drops the fields
// it names, and writes its own after the others.
type FieldEdit interface {
	// Drops reports whether a field named name is left out.
	Drops(name []byte) bool
	// Lines are the fields to write, each "Name: value\r\n".
	Lines() []byte
}

// WriteHead writes the head of r as baton forwards it: the request line
// in origin-form with the normalised path, Host from r.Authority (or
// fwd.Host when that is empty), the fields but hop-by-hop and framing
// ones, X-Forwarded-For (fwd.For, after the client's chain when it is
// trusted), X-Forwarded-Proto and X-Forwarded-Host (the trusted client's,
// else baton's), the framing of body, and the protocol switch when r asks
// for one. Nothing that frames the message is copied from the client.
func (r *Request) WriteHead(w *bufio.Writer, body Framing, fwd *Forwarded) {
	w.Write(r.Method)
	w.WriteByte(' ')
	if fwd.Path != nil {
		w.Write(fwd.Path)
	} else {
		w.Write(r.Path)
	}
	w.Write(r.Query)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	switch {
	case fwd.Authority != nil:
		w.Write(fwd.Authority)
	case len(r.Authority) > 0:
		w.Write(r.Authority)
	default:
		w.WriteString(fwd.Host)
	}
	w.Write(crlf)
	xff := false
	for i := range r.Fields {
		f := &r.Fields[i]
		switch {
		case f.drop:
		case len(f.Name) == 15 && EqualFold(f.Name, "x-forwarded-for"):
			xff = true
		case fwd.Edit != nil && fwd.Edit.Drops(f.Name):
		default:
			writeField(w, f)
		}
	}
	if fwd.Edit != nil {
		w.Write(fwd.Edit.Lines())
	}
	w.WriteString("X-Forwarded-For: ")
	if xff && fwd.Trusted {
		for i := range r.Fields {
			f := &r.Fields[i]
			if !f.drop && len(f.Name) == 15 && EqualFold(f.Name, "x-forwarded-for") {
				w.Write(f.Value)
				w.WriteString(", ")
			}
		}
	}
	w.Write(fwd.For)
	w.WriteString("\r\nX-Forwarded-Proto: ")
	if fwd.Trusted && r.fwdProto != nil {
		w.Write(r.fwdProto)
	} else {
		w.WriteString(fwd.Proto)
	}
	w.Write(crlf)
	switch {
	case fwd.Trusted && r.fwdHost != nil:
		w.WriteString("X-Forwarded-Host: ")
		w.Write(r.fwdHost)
		w.Write(crlf)
	case len(r.Authority) > 0:
		w.WriteString("X-Forwarded-Host: ")
		w.Write(r.Authority)
		w.Write(crlf)
	}
	writeFraming(w, body)
	if r.Upgrade != nil {
		w.WriteString("Connection: Upgrade\r\nUpgrade: ")
		w.Write(r.Upgrade)
		w.Write(crlf)
	}
	w.Write(crlf)
}

// ResponseOut says how a response head goes to the client.
type ResponseOut struct {
	Body Framing
	// Connection is the Connection field to send ("close", "keep-alive",
	// or "Upgrade" for a 101, which keeps the Upgrade field), or "".
	Connection string
	// Extra holds header lines of the proxy's own, each ending in CRLF.
	Extra []byte
	// Edit, when set, changes the response's fields (a route's header
	// filter); framing and Connection are written after it decides.
	Edit FieldEdit
}

// WriteHead writes the head of r for the client: an HTTP/1.1 status line,
// the fields but hop-by-hop and framing ones, then out's framing, extra
// lines and Connection.
func (r *Response) WriteHead(w *bufio.Writer, out *ResponseOut) {
	w.WriteString("HTTP/1.1 ")
	w.Write(strconv.AppendInt(w.AvailableBuffer(), int64(r.Status), 10))
	w.WriteByte(' ')
	w.Write(r.Reason)
	w.Write(crlf)
	upgrade := out.Connection == "Upgrade"
	for i := range r.Fields {
		f := &r.Fields[i]
		if (!f.drop || (upgrade && EqualFold(f.Name, "upgrade"))) && (out.Edit == nil || !out.Edit.Drops(f.Name)) {
			writeField(w, f)
		}
	}
	if out.Edit != nil {
		w.Write(out.Edit.Lines())
	}
	writeFraming(w, out.Body)
	w.Write(out.Extra)
	if out.Connection != "" {
		w.WriteString("Connection: ")
		w.WriteString(out.Connection)
		w.Write(crlf)
	}
	w.Write(crlf)
}

func writeField(w *bufio.Writer, f *Field) {
	w.Write(f.Name)
	w.WriteString(": ")
	w.Write(f.Value)
	w.Write(crlf)
}

func writeFraming(w *bufio.Writer, body Framing) {
	switch {
	case body.Chunked:
		w.WriteString("Transfer-Encoding: chunked\r\n")
	case body.Length >= 0:
		w.WriteString("Content-Length: ")
		w.Write(strconv.AppendInt(w.AvailableBuffer(), body.Length, 10))
		w.Write(crlf)
	}
}
