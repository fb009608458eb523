package h2

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// headerReader decodes a header block (a HEADERS frame and the
// CONTINUATION frames after it) with the checks of http2.Framer's
// ReadMetaHeaders (x/net v0.59.0, frame.go: readMetaFrame and
// checkPseudos), which it replaces: the Framer's allocates a frame, an
// emit closure and a field slice grown field by field for every block,
// 64% of the bytes an HTTP/2 worker allocated per request (a heap
// profile of the bench's HTTP/2 row: BATON_WORKER_HEAPPROFILE), and the
// worker collected five times a second. Here the decoder, its emit
// function and the slice fields are decoded into are the connection's,
// kept from one block to the next; a stream gets a copy of exactly its
// fields, since its Request keeps them. The slice is the connection's
// only while a block is read, and the worker's between blocks
// (fieldSlices): an idle connection does not hold one.
type headerReader struct {
	dec    *hpack.Decoder
	fields []hpack.HeaderField // during read: from fieldSlices
	// The block's state, as the Framer keeps it.
	remain     uint32 // of the header list size
	sawRegular bool
	truncated  bool
	invalid    error
	// mh is the block's frame, handed to process, which keeps nothing
	// of it but the fields.
	mh http2.MetaHeadersFrame
}

func newHeaderReader() *headerReader {
	r := &headerReader{dec: hpack.NewDecoder(4096, nil)}
	r.dec.SetEmitFunc(r.emit)
	return r
}

// fieldSlices holds the slices header blocks are decoded into, between
// blocks. Kept per connection, the slice stayed with every idle HTTP/2
// connection (docs/design.md, "HTTP/2": 25.6 KB a connection with it,
// 24.8-25.4 KB since).
var fieldSlices = sync.Pool{New: func() any {
	s := make([]hpack.HeaderField, 0, 16)
	return &s
}}

var errPseudoAfterRegular = errors.New("pseudo header field after regular")

// emit takes one decoded field: a field after one that was invalid, or
// past the header list size, is not kept (the decoder goes on, to keep
// its table right).
func (r *headerReader) emit(hf hpack.HeaderField) {
	if !httpguts.ValidHeaderFieldValue(hf.Value) {
		// The value is not in the error: it may be sensitive.
		r.invalid = fmt.Errorf("invalid header field value for %q", hf.Name)
	}
	if strings.HasPrefix(hf.Name, ":") {
		if r.sawRegular {
			r.invalid = errPseudoAfterRegular
		}
	} else {
		r.sawRegular = true
		if !validWireName(hf.Name) {
			r.invalid = fmt.Errorf("invalid header field name %q", hf.Name)
		}
	}
	if r.invalid != nil {
		r.dec.SetEmitEnabled(false)
		return
	}
	size := hf.Size()
	if size > r.remain {
		r.dec.SetEmitEnabled(false)
		r.truncated, r.remain = true, 0
		return
	}
	r.remain -= size
	r.fields = append(r.fields, hf)
}

// validWireName says whether a field name may be on the wire: a token,
// in lower case (RFC 9113 §8.2.1).
func validWireName(v string) bool {
	if v == "" {
		return false
	}
	for _, c := range v {
		if !httpguts.IsTokenRune(c) || 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return true
}

// read decodes the header block hf starts, reading its CONTINUATION
// frames from fr (the Framer sees to it that nothing comes between
// them), within the header list size max. Its errors are the Framer's:
// a ConnectionError for a block too large or that does not decode, a
// StreamError for a malformed field.
func (r *headerReader) read(fr *http2.Framer, hf *http2.HeadersFrame, max uint32) (*http2.MetaHeadersFrame, error) {
	sp := fieldSlices.Get().(*[]hpack.HeaderField)
	r.fields = (*sp)[:0]
	defer func() {
		clear(r.fields) // the strings go with the stream, not the pool
		*sp, r.fields = r.fields[:0], nil
		fieldSlices.Put(sp)
	}()
	r.remain, r.sawRegular, r.truncated, r.invalid = max, false, false, nil
	r.dec.SetEmitEnabled(true)
	r.dec.SetMaxStringLength(int(max))
	var hc interface {
		HeaderBlockFragment() []byte
		HeadersEnded() bool
	} = hf
	for {
		frag := hc.HeaderBlockFragment()
		// A fragment of more than twice what the list may still take,
		// or any after the list was full or a field invalid: the
		// connection ends rather than decode what would be dropped
		// (as the Framer does; CVE-2023-45288, CONTINUATION flood).
		if int64(len(frag)) > 2*int64(r.remain) || r.invalid != nil {
			return nil, http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if _, err := r.dec.Write(frag); err != nil {
			return nil, http2.ConnectionError(http2.ErrCodeCompression)
		}
		if hc.HeadersEnded() {
			break
		}
		f, err := fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		hc = f.(*http2.ContinuationFrame) // the Framer's frame order check
	}
	if err := r.dec.Close(); err != nil {
		return nil, http2.ConnectionError(http2.ErrCodeCompression)
	}
	if r.invalid != nil {
		return nil, http2.StreamError{StreamID: hf.StreamID, Code: http2.ErrCodeProtocol, Cause: r.invalid}
	}
	mh := &r.mh
	*mh = http2.MetaHeadersFrame{HeadersFrame: hf, Truncated: r.truncated}
	if len(r.fields) > 0 {
		mh.Fields = make([]hpack.HeaderField, len(r.fields))
		copy(mh.Fields, r.fields)
	}
	if err := checkPseudos(mh.PseudoFields()); err != nil {
		return nil, http2.StreamError{StreamID: hf.StreamID, Code: http2.ErrCodeProtocol, Cause: err}
	}
	return mh, nil
}

// checkPseudos refuses unknown pseudo-header fields, one twice, and
// request and response ones together (RFC 9113 §8.3).
func checkPseudos(pf []hpack.HeaderField) error {
	var isRequest, isResponse bool
	for i, hf := range pf {
		switch hf.Name {
		case ":method", ":path", ":scheme", ":authority", ":protocol":
			isRequest = true
		case ":status":
			isResponse = true
		default:
			return fmt.Errorf("invalid pseudo-header %q", hf.Name)
		}
		for _, prev := range pf[:i] {
			if hf.Name == prev.Name {
				return fmt.Errorf("duplicate pseudo-header %q", hf.Name)
			}
		}
	}
	if isRequest && isResponse {
		return errors.New("mix of request and response pseudo headers")
	}
	return nil
}
