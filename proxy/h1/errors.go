package h1

// Error is a message h1 refuses: Status is the answer the refusal calls
// for, Reason says why (for logs). A request's status goes to its client; a
// response that h1 refuses is a 502 to the client, whatever Status says.
type Error struct {
	Status int
	Reason string
}

func (e *Error) Error() string { return "http/1.1: " + e.Reason }

// The refusals. Each is one value, so that refusing allocates nothing and
// tests can compare with errors.Is.
var (
	// ErrHeadTooLarge: the head does not fit http.maxHeaderBytes.
	ErrHeadTooLarge = &Error{431, "head too large"}
	// ErrTooManyFields: more than MaxFields header fields.
	ErrTooManyFields = &Error{431, "too many header fields"}
	// ErrBodyTooLarge: the body is larger than its limit.
	ErrBodyTooLarge = &Error{413, "body too large"}

	errRequestLine     = &Error{400, "malformed request line"}
	errMethod          = &Error{400, "method is not a token"}
	errMethodNotProxy  = &Error{405, "method not allowed"}
	errVersion         = &Error{400, "malformed HTTP version"}
	errVersionUnknown  = &Error{505, "unsupported HTTP version"}
	errTarget          = &Error{400, "malformed request-target"}
	errTargetForm      = &Error{400, "request-target form not allowed"}
	errTargetUserinfo  = &Error{400, "userinfo in request-target"}
	errTargetScheme    = &Error{400, "request-target scheme is not http or https"}
	errEscape          = &Error{400, "invalid percent-encoding in path"}
	errEscapeNUL       = &Error{400, "%00 in path"}
	errPathAboveRoot   = &Error{400, "path climbs above the root"}
	errPathHiddenDots  = &Error{400, "dot-segment behind an encoded slash or backslash"}
	errBareCR          = &Error{400, "bare CR in head"}
	errFieldName       = &Error{400, "invalid field name"}
	errFieldValue      = &Error{400, "invalid character in field value"}
	errObsFold         = &Error{400, "obsolete line folding"}
	errHostMissing     = &Error{400, "missing Host"}
	errHostDuplicate   = &Error{400, "duplicate Host"}
	errHost            = &Error{400, "invalid Host"}
	errLengthInvalid   = &Error{400, "invalid Content-Length"}
	errLengthDuplicate = &Error{400, "duplicate Content-Length"}
	errTEDuplicate     = &Error{400, "duplicate Transfer-Encoding"}
	errTEWithLength    = &Error{400, "both Transfer-Encoding and Content-Length"}
	errTEInHTTP10      = &Error{400, "Transfer-Encoding in HTTP/1.0"}
	errTENotChunked    = &Error{400, "final transfer coding is not chunked"}
	errTEUnsupported   = &Error{501, "unsupported transfer coding"}
	errConnectionNames = &Error{400, "too many Connection options"}

	errStatusLine = &Error{502, "malformed status line"}

	errChunkSize      = &Error{400, "malformed chunk size"}
	errChunkExtension = &Error{400, "malformed chunk extension"}
	errChunkEnd       = &Error{400, "chunk data not followed by CRLF"}
	errChunkLine      = &Error{400, "chunk line not ended by CRLF"}
	errTrailer        = &Error{400, "malformed trailer field"}
	errTooManyTrailer = &Error{400, "too many trailer fields"}
)

// ReadError and WriteError wrap an I/O error of a body copy, to tell which
// side of it failed.
type (
	ReadError  struct{ Err error }
	WriteError struct{ Err error }
)

func (e *ReadError) Error() string  { return "read: " + e.Err.Error() }
func (e *ReadError) Unwrap() error  { return e.Err }
func (e *WriteError) Error() string { return "write: " + e.Err.Error() }
func (e *WriteError) Unwrap() error { return e.Err }
