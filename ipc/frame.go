// Package ipc is the wire between baton's supervisor, its workers and its
// command line: framed, versioned messages, and listening sockets passed with
// the message they belong to.
//
// A frame is an 8-byte header followed by a JSON body:
//
//	offset 0  2 bytes  magic "BT"
//	offset 2  1 byte   protocol version (1)
//	offset 3  1 byte   message type
//	offset 4  4 bytes  body length, big endian
//	offset 8  body     a JSON object, at most MaxFrame-8 bytes
//
// Between the supervisor and a worker, frames travel over an AF_UNIX
// SOCK_SEQPACKET socket, one frame per packet, so that descriptors (SCM_RIGHTS)
// arrive with exactly the frame they belong to. The control socket is a
// SOCK_STREAM socket carrying the same frames back to back.
//
// Decoding never panics: a short, oversized or otherwise malformed frame is
// an error wrapping ErrMalformed, ErrTooLarge or ErrVersion. docs/protocol.md
// describes the protocol for programs not written in Go.
package ipc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Version is the protocol version this package speaks.
const Version = 1

// Frame limits.
const (
	// HeaderSize is the size of a frame header.
	HeaderSize = 8
	// MaxFrame is the largest frame, header included.
	MaxFrame = 256 << 10
	// MaxFiles is the most descriptors one frame may carry (the kernel's
	// SCM_MAX_FD).
	MaxFiles = 253
)

var magic = [2]byte{'B', 'T'}

// Errors returned by the decoder. Each error the package returns for bad
// input wraps one of them.
var (
	// ErrMalformed reports a frame that does not follow the format.
	ErrMalformed = errors.New("ipc: malformed frame")
	// ErrTooLarge reports a frame larger than MaxFrame.
	ErrTooLarge = errors.New("ipc: frame too large")
	// ErrVersion reports a frame of another protocol version.
	ErrVersion = errors.New("ipc: unsupported protocol version")
	// ErrUnexpected reports a message that is valid but not allowed where
	// it arrived (for example descriptors on anything but a hello).
	ErrUnexpected = errors.New("ipc: unexpected message")
)

// Type is a message type.
type Type uint8

// Message types. Hello and Drain go from the supervisor to a worker; Ready,
// Failed, Stats and Stopped from a worker to the supervisor; Orphan (a worker whose
// supervisor died, to the one adopting it) and Adopted (the answer) open an
// adoption; Request and Response are the control socket's.
const (
	TypeHello    Type = 1
	TypeReady    Type = 2
	TypeFailed   Type = 3
	TypeDrain    Type = 4
	TypeStats    Type = 5
	TypeOrphan   Type = 6
	TypeAdopted  Type = 7
	TypeTickets  Type = 8
	TypeLogFile  Type = 9
	TypeWaiting  Type = 10
	TypeAccept   Type = 11
	TypeRouting  Type = 12
	TypeStopped  Type = 13
	TypeRequest  Type = 16
	TypeResponse Type = 17
)

var typeNames = map[Type]string{
	TypeHello:    "hello",
	TypeReady:    "ready",
	TypeFailed:   "failed",
	TypeDrain:    "drain",
	TypeStats:    "stats",
	TypeOrphan:   "orphan",
	TypeAdopted:  "adopted",
	TypeTickets:  "tickets",
	TypeLogFile:  "logfile",
	TypeWaiting:  "waiting",
	TypeAccept:   "accept",
	TypeRouting:  "routing",
	TypeStopped:  "stopped",
	TypeRequest:  "request",
	TypeResponse: "response",
}

func (t Type) String() string {
	if s, ok := typeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Frame is one decoded frame: its type and its JSON body.
type Frame struct {
	Type Type
	Body []byte
}

// Unmarshal decodes the frame's body into v.
func (f Frame) Unmarshal(v any) error {
	if err := json.Unmarshal(f.Body, v); err != nil {
		return fmt.Errorf("%w: %s body: %w", ErrMalformed, f.Type, err)
	}
	return nil
}

// Encode returns the frame of type t whose body is v encoded as JSON.
func Encode(t Type, v any) ([]byte, error) {
	if _, ok := typeNames[t]; !ok {
		return nil, fmt.Errorf("ipc: encode: unknown message type %d", t)
	}
	body, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("ipc: encode %s: %w", t, err)
	}
	if HeaderSize+len(body) > MaxFrame {
		return nil, fmt.Errorf("%w: %s of %d bytes (limit %d)", ErrTooLarge, t, HeaderSize+len(body), MaxFrame)
	}
	b := make([]byte, HeaderSize, HeaderSize+len(body))
	putHeader(b, t, len(body))
	return append(b, body...), nil
}

func putHeader(b []byte, t Type, n int) {
	b[0], b[1] = magic[0], magic[1]
	b[2] = Version
	b[3] = byte(t)
	binary.BigEndian.PutUint32(b[4:8], uint32(n))
}

// parseHeader checks a frame header and returns its type and body length.
func parseHeader(h []byte) (Type, int, error) {
	if len(h) < HeaderSize {
		return 0, 0, fmt.Errorf("%w: %d bytes is shorter than a header", ErrMalformed, len(h))
	}
	if h[0] != magic[0] || h[1] != magic[1] {
		return 0, 0, fmt.Errorf("%w: bad magic %#x %#x", ErrMalformed, h[0], h[1])
	}
	if h[2] != Version {
		return 0, 0, fmt.Errorf("%w: got %d, speak %d", ErrVersion, h[2], Version)
	}
	t := Type(h[3])
	if _, ok := typeNames[t]; !ok {
		return 0, 0, fmt.Errorf("%w: unknown message type %d", ErrMalformed, h[3])
	}
	n := binary.BigEndian.Uint32(h[4:8])
	if uint64(n)+HeaderSize > MaxFrame {
		return 0, 0, fmt.Errorf("%w: body of %d bytes (limit %d)", ErrTooLarge, n, MaxFrame-HeaderSize)
	}
	return t, int(n), nil
}

// Decode decodes one whole frame, as a SOCK_SEQPACKET packet delivers it.
// The body must be exactly as long as the header says and be a JSON object.
func Decode(b []byte) (Frame, error) {
	if len(b) > MaxFrame {
		return Frame{}, fmt.Errorf("%w: %d bytes (limit %d)", ErrTooLarge, len(b), MaxFrame)
	}
	t, n, err := parseHeader(b)
	if err != nil {
		return Frame{}, err
	}
	if len(b)-HeaderSize != n {
		return Frame{}, fmt.Errorf("%w: header says %d body bytes, got %d", ErrMalformed, n, len(b)-HeaderSize)
	}
	body := b[HeaderSize:]
	if err := checkObject(body); err != nil {
		return Frame{}, fmt.Errorf("%w: %s body: %w", ErrMalformed, t, err)
	}
	return Frame{Type: t, Body: body}, nil
}

// checkObject reports whether b is one valid JSON object.
func checkObject(b []byte) error {
	if !json.Valid(b) {
		return errors.New("not valid JSON")
	}
	if trimmed := bytes.TrimLeft(b, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '{' {
		return nil
	}
	return errors.New("not a JSON object")
}

// ReadFrame reads one frame from a byte stream such as the control socket.
// It reads no further than the frame's end.
func ReadFrame(r io.Reader) (Frame, error) {
	var h [HeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, fmt.Errorf("%w: stream ended inside a header", ErrMalformed)
		}
		return Frame{}, err // io.EOF: the peer closed between frames
	}
	_, n, err := parseHeader(h[:])
	if err != nil {
		return Frame{}, err
	}
	b := make([]byte, HeaderSize+n)
	copy(b, h[:])
	if _, err := io.ReadFull(r, b[HeaderSize:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, fmt.Errorf("%w: stream ended inside a body", ErrMalformed)
		}
		return Frame{}, err
	}
	return Decode(b)
}

// WriteFrame encodes v as a frame of type t and writes it to w.
func WriteFrame(w io.Writer, t Type, v any) error {
	b, err := Encode(t, v)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
