// Package h1 owns baton's HTTP/1.1 wire format: it reads heads into a
// buffer (Reader), parses request and response heads in place
// (Request.Parse, Response.Parse), copies bodies while checking their
// framing and framing them anew (Body), and writes heads for forwarding
// (Request.WriteHead, Response.WriteHead).
//
// Its invariant: whatever it accepts has exactly one reading, and whatever
// it writes says only that reading. Parsing is strict, per RFC 9112; what
// is ambiguous is refused with an *Error that carries the status to answer
// (docs/security.md lists every rule and its source). Nothing that frames
// a message (request line, Host, Content-Length, Transfer-Encoding, chunk
// sizes) is copied from the input: it is written from what was parsed.
// Processing a head is linear in its size.
//
// The package does no connection handling and keeps no state between
// messages but buffers: the proxy drives it.
package h1
