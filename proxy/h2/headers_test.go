package h2

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// headerListMax is the fuzzer's header list size: small, so that blocks
// past it (truncated, or refused whole) come often.
const headerListMax = 200

// blockFrames writes block as a HEADERS frame on stream 1 and
// CONTINUATION frames, cut at the lengths in cuts.
func blockFrames(block []byte, cuts []byte, endStream bool) []byte {
	var buf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	first := true
	for len(block) > 0 || first {
		n := len(block)
		if len(cuts) > 0 {
			n = min(n, int(cuts[0]))
			cuts = cuts[1:]
		}
		frag, end := block[:n], n == len(block)
		block = block[n:]
		if first {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: frag, EndStream: endStream, EndHeaders: end})
			first = false
		} else {
			fr.WriteContinuation(1, end, frag)
		}
	}
	return buf.Bytes()
}

// outcome is what reading a header block came to, to compare.
type outcome struct {
	err       string // "": none; else the error's kind and code
	fields    []hpack.HeaderField
	truncated bool
}

func errKind(err error) string {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &se):
		return "stream " + se.Code.String()
	case errors.As(err, &ce):
		return "connection " + http2.ErrCode(ce).String()
	}
	return "other"
}

// readAll reads the header blocks of wire in turn with read, until the
// end or a connection error.
func readAll(read func(*http2.Framer, *http2.HeadersFrame) (*http2.MetaHeadersFrame, error), fr *http2.Framer) []outcome {
	var out []outcome
	for {
		f, err := fr.ReadFrame()
		var mh *http2.MetaHeadersFrame
		switch {
		case err == nil && read != nil:
			mh, err = read(fr, f.(*http2.HeadersFrame))
		case err == nil:
			mh = f.(*http2.MetaHeadersFrame)
		}
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			out = append(out, outcome{err: errKind(err)})
			if _, ok := err.(http2.StreamError); !ok {
				return out // the connection ends
			}
			continue
		}
		out = append(out, outcome{fields: slices.Clone(mh.Fields), truncated: mh.Truncated})
	}
}

// readStd reads the frames with the Framer's own ReadMetaHeaders.
func readStd(wire []byte) []outcome {
	fr := http2.NewFramer(nil, bytes.NewReader(wire))
	fr.MaxHeaderListSize = headerListMax
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	return readAll(nil, fr)
}

// readOurs reads them with one headerReader.
func readOurs(wire []byte) []outcome {
	fr := http2.NewFramer(nil, bytes.NewReader(wire))
	r := newHeaderReader()
	return readAll(func(fr *http2.Framer, hf *http2.HeadersFrame) (*http2.MetaHeadersFrame, error) {
		return r.read(fr, hf, headerListMax)
	}, fr)
}

// FuzzHeaderBlock reads a header block, cut into a HEADERS frame and
// CONTINUATIONs, with headerReader and with x/net's ReadMetaHeaders,
// which it replaces: the same fields, the same truncation, the same
// error kind and code (RFC 9113 §8.2 and §8.3: field names in lower case,
// no pseudo-header after a regular field, none unknown or twice; RFC 7541
// for the decoding; CVE-2023-45288 for a block far past the list size).
// Each reads the block twice over, as a connection's decoder does.
func FuzzHeaderBlock(f *testing.F) {
	enc := func(fs ...string) []byte {
		var b bytes.Buffer
		e := hpack.NewEncoder(&b)
		for i := 0; i+1 < len(fs); i += 2 {
			e.WriteField(hpack.HeaderField{Name: fs[i], Value: fs[i+1]})
		}
		return b.Bytes()
	}
	req := enc(":method", "GET", ":scheme", "https", ":authority", "a.example", ":path", "/", "accept", "*/*")
	f.Add(req, []byte{}, true)
	f.Add(req, []byte{1, 2, 3}, false)
	f.Add(enc(":method", "GET", "Accept", "x"), []byte{}, true)                   // upper case
	f.Add(enc("accept", "x", ":path", "/"), []byte{}, true)                       // pseudo after regular
	f.Add(enc(":path", "/", ":path", "/b"), []byte{}, true)                       // twice
	f.Add(enc(":status", "200", ":path", "/"), []byte{}, true)                    // request and response
	f.Add(enc(":bogus", "x"), []byte{}, true)                                     // unknown
	f.Add(enc("x", "a\x00b"), []byte{}, true)                                     // NUL in a value
	f.Add(enc("x", string(bytes.Repeat([]byte("v"), 300))), []byte{40, 40}, true) // past the list
	f.Add([]byte{0xff, 0xff, 0xff}, []byte{}, true)                               // does not decode
	f.Fuzz(func(t *testing.T, block, cuts []byte, endStream bool) {
		if len(block) > 4096 || len(cuts) > 64 {
			return
		}
		for i := range cuts {
			cuts[i] = max(cuts[i], 1) // no empty CONTINUATION: frames of nothing
		}
		one := blockFrames(block, cuts, endStream)
		// The block twice, as a connection's decoder meets them: what
		// the first leaves in the reader (its table, its state) meets
		// the second.
		wire := append(slices.Clone(one), one...)
		std, ours := readStd(wire), readOurs(wire)
		if !slices.EqualFunc(std, ours, func(a, b outcome) bool {
			return a.err == b.err && a.truncated == b.truncated && slices.Equal(a.fields, b.fields)
		}) {
			t.Fatalf("x/net %+v, headerReader %+v", std, ours)
		}
	})
}

// TestHeaderReaderHoldsNoSlice: between blocks the reader holds no field
// slice (an idle connection's memory, issue 23), and a block's fields
// are its own: the next block, decoded into the same pooled slice,
// leaves them as they were.
func TestHeaderReaderHoldsNoSlice(t *testing.T) {
	var enc bytes.Buffer
	he := hpack.NewEncoder(&enc)
	block := func(path string) []byte {
		enc.Reset()
		for _, f := range []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"}, {Name: ":path", Value: path}, {Name: "user-agent", Value: "t"}} {
			he.WriteField(f)
		}
		return slices.Clone(enc.Bytes())
	}
	wire := append(blockFrames(block("/first"), nil, true), blockFrames(block("/second"), []byte{3}, true)...)
	fr := http2.NewFramer(nil, bytes.NewReader(wire))
	r := newHeaderReader()
	var got [][]hpack.HeaderField
	for range 2 {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		mh, err := r.read(fr, f.(*http2.HeadersFrame), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if r.fields != nil {
			t.Fatalf("after a block the reader holds a slice of %d fields", cap(r.fields))
		}
		got = append(got, mh.Fields)
	}
	for i, want := range []string{"/first", "/second"} {
		if p := got[i][2]; p.Name != ":path" || p.Value != want {
			t.Errorf("block %d: field 2 is %s: %s, want :path: %s", i, p.Name, p.Value, want)
		}
	}
}
