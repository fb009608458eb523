package ipc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	in := Hello{Generation: 7, Slot: 1, Workers: 2, Listeners: []ListenerInfo{{Name: "web", Network: "tcp4", Address: "127.0.0.1:80", Protocol: "http", Sockets: []int{1, 3}}}, Config: []byte(`{"a":1}`)}
	b, err := Encode(TypeHello, in)
	if err != nil {
		t.Fatal(err)
	}
	fr, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if fr.Type != TypeHello {
		t.Fatalf("type = %s", fr.Type)
	}
	var out Hello
	if err := fr.Unmarshal(&out); err != nil {
		t.Fatal(err)
	}
	if out.Generation != 7 || out.Slot != 1 || out.Files() != 2 || string(out.Config) != `{"a":1}` {
		t.Fatalf("round trip = %+v", out)
	}
}

func frame(magic string, version, typ byte, length uint32, body string) []byte {
	b := []byte(magic)
	b = append(b, version, typ)
	b = binary.BigEndian.AppendUint32(b, length)
	return append(b, body...)
}

func TestDecodeRejects(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"short header", []byte("BT\x01"), ErrMalformed},
		{"bad magic", frame("XX", 1, 2, 2, "{}"), ErrMalformed},
		{"other version", frame("BT", 2, 2, 2, "{}"), ErrVersion},
		{"unknown type", frame("BT", 1, 99, 2, "{}"), ErrMalformed},
		{"length longer than body", frame("BT", 1, 2, 3, "{}"), ErrMalformed},
		{"length shorter than body", frame("BT", 1, 2, 1, "{}"), ErrMalformed},
		{"length over limit", frame("BT", 1, 2, MaxFrame, "{}"), ErrTooLarge},
		{"huge length", frame("BT", 1, 2, 0xffffffff, "{}"), ErrTooLarge},
		{"not JSON", frame("BT", 1, 2, 2, "{x"), ErrMalformed},
		{"not an object", frame("BT", 1, 2, 2, "[]"), ErrMalformed},
		{"empty body", frame("BT", 1, 2, 0, ""), ErrMalformed},
		{"oversized packet", append(frame("BT", 1, 2, 2, "{}"), make([]byte, MaxFrame)...), ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.in)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Decode = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestEncodeTooLarge(t *testing.T) {
	_, err := Encode(TypeFailed, Failed{Reason: strings.Repeat("x", MaxFrame)})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Encode = %v, want ErrTooLarge", err)
	}
}

func TestReadFrameStream(t *testing.T) {
	var buf bytes.Buffer
	for i := range 3 {
		if err := WriteFrame(&buf, TypeDrain, Drain{Deadline: time.Unix(int64(i), 0).UTC(), Reason: "r"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		fr, err := ReadFrame(&buf)
		if err != nil {
			t.Fatal(err)
		}
		var d Drain
		if err := fr.Unmarshal(&d); err != nil || d.Deadline.Unix() != int64(i) {
			t.Fatalf("frame %d: %+v %v", i, d, err)
		}
	}
	if _, err := ReadFrame(&buf); err != io.EOF {
		t.Fatalf("after last frame: %v, want io.EOF", err)
	}
	cut := frame("BT", 1, 2, 10, "{}")
	if _, err := ReadFrame(bytes.NewReader(cut)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated body: %v, want ErrMalformed", err)
	}
	if _, err := ReadFrame(bytes.NewReader(cut[:5])); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated header: %v, want ErrMalformed", err)
	}
}

// FuzzDecode checks that no input makes the decoder panic, that whatever it
// accepts re-encodes to the same frame, and that the stream reader agrees
// with the packet decoder.
func FuzzDecode(f *testing.F) {
	for _, seed := range [][]byte{
		frame("BT", 1, 1, 2, "{}"),
		frame("BT", 1, 4, 14, `{"reason":"x"}`),
		frame("BT", 1, 17, 0xffff, "{}"),
		frame("BT", 3, 2, 2, "{}"),
		[]byte("BT"),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := Decode(b)
		sfr, serr := ReadFrame(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrVersion) {
				t.Fatalf("Decode error %v wraps no package error", err)
			}
			return
		}
		if serr != nil || sfr.Type != fr.Type || !bytes.Equal(sfr.Body, fr.Body) {
			t.Fatalf("ReadFrame = %v, %v; Decode accepted %v", sfr, serr, fr)
		}
		// Every typed body must unmarshal or fail cleanly.
		var v any
		switch fr.Type {
		case TypeHello:
			v = new(Hello)
		case TypeDrain:
			v = new(Drain)
		case TypeStats:
			v = new(Stats)
		case TypeFailed:
			v = new(Failed)
		case TypeRequest:
			v = new(Request)
		case TypeResponse:
			v = new(Response)
		default:
			v = new(Ready)
		}
		if err := fr.Unmarshal(v); err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("Unmarshal error %v is not ErrMalformed", err)
		}
	})
}
