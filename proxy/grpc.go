package proxy

import (
	"bytes"
	"strconv"
	"time"

	"github.com/baton-proxy/baton/proxy/h1"
)

// gRPC over HTTP/2 (github.com/grpc/grpc, doc/PROTOCOL-HTTP2.md), as far
// as a proxy sees it: a request whose content-type is application/grpc
// (or application/grpc+proto, ;charset...), a deadline in grpc-timeout,
// and the status of a call in the grpc-status trailer. baton's own
// failures are answered the way a gRPC client reads them: a
// "Trailers-Only" response (one HEADERS frame that ends the stream, with
// :status 200, content-type and grpc-status), never an HTTP error page.

// isGRPC reports whether req is a gRPC call: its content-type is
// application/grpc, alone or followed by '+' (a codec) or ';'.
func isGRPC(req *h1.Request) bool {
	ct := req.Field("content-type")
	const p = "application/grpc"
	if len(ct) < len(p) || !h1.EqualFold(ct[:len(p)], p) {
		return false
	}
	return len(ct) == len(p) || ct[len(p)] == '+' || ct[len(p)] == ';'
}

// gRPC status codes baton answers with (google.golang.org/grpc/codes).
const (
	grpcInternal          = 13
	grpcUnimplemented     = 12
	grpcUnavailable       = 14
	grpcDeadlineExceeded  = 4
	grpcPermissionDenied  = 7
	grpcResourceExhausted = 8
	grpcUnauthenticated   = 16
)

// grpcStatus is the gRPC status of an HTTP status baton would answer a
// request with: the mapping of PROTOCOL-HTTP2.md ("HTTP to gRPC Status
// Code Mapping"), but 504, baton's timeout, which is DEADLINE_EXCEEDED
// as Envoy answers it, and 413, a message over the route's limit,
// RESOURCE_EXHAUSTED as gRPC's own servers answer one.
func grpcStatus(status int) int {
	switch status {
	case 400, 405, 431:
		return grpcInternal
	case 401:
		return grpcUnauthenticated
	case 403:
		return grpcPermissionDenied
	case 404:
		return grpcUnimplemented
	case 413:
		return grpcResourceExhausted
	case 504, 408:
		return grpcDeadlineExceeded
	case 429, 502, 503:
		return grpcUnavailable
	}
	return grpcInternal
}

// parseGRPCTimeout parses a grpc-timeout value: 1 to 8 ASCII digits and a
// unit (H, M, S, m, u, n). A value that breaks that is no deadline (as
// gRPC's servers refuse it, baton does not guess).
func parseGRPCTimeout(v []byte) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	var n int64
	for _, c := range v[:len(v)-1] {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	if n > int64(maxDuration/unit) {
		return maxDuration, true
	}
	return time.Duration(n) * unit, true
}

const maxDuration = time.Duration(1<<63 - 1)

// appendGRPCTimeout writes d as a grpc-timeout value, in the finest unit
// in which it takes at most 8 digits, rounded down: the deadline a
// backend gets is never later than the client's.
func appendGRPCTimeout(dst []byte, d time.Duration) string {
	if d < 0 {
		d = 0
	}
	units := [...]struct {
		d time.Duration
		c byte
	}{{time.Nanosecond, 'n'}, {time.Microsecond, 'u'}, {time.Millisecond, 'm'}, {time.Second, 'S'}, {time.Minute, 'M'}, {time.Hour, 'H'}}
	for _, u := range units {
		if n := int64(d / u.d); n <= 99999999 {
			dst = strconv.AppendInt(dst, n, 10)
			return string(append(dst, u.c))
		}
	}
	return "99999999H"
}

// grpcDeadline is the end of req's grpc-timeout, counted from start;
// zero when it has none (or one that cannot be read).
func grpcDeadline(req *h1.Request, start time.Time) time.Time {
	v := req.Field("grpc-timeout")
	if v == nil {
		return time.Time{}
	}
	d, ok := parseGRPCTimeout(bytes.TrimSpace(v))
	if !ok {
		return time.Time{}
	}
	if d > 100*365*24*time.Hour {
		return time.Time{} // no deadline a proxy need keep
	}
	return start.Add(d)
}
