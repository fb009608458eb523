package h1

// Character classes of RFC 9110 and RFC 3986, as lookup tables.

// charClass is a set of bytes.
type charClass [256]bool

func (c *charClass) add(s string) {
	for i := 0; i < len(s); i++ {
		c[s[i]] = true
	}
}

func (c *charClass) addRange(lo, hi byte) {
	for b := int(lo); b <= int(hi); b++ {
		c[b] = true
	}
}

var (
	// tokenChars: tchar, RFC 9110 §5.6.2.
	tokenChars charClass
	// valueChars: field-vchar, SP and HTAB (VCHAR / obs-text), RFC 9110
	// §5.5.
	valueChars charClass
	// targetChars: what a request-target may hold (RFC 9112 §3.2): any
	// VCHAR or obs-text but '#', which starts a fragment, never sent.
	targetChars charClass
	// hostChars: reg-name characters, RFC 3986 §3.2.2 (unreserved and
	// sub-delims; baton takes no pct-encoded hosts).
	hostChars charClass
	// unreservedChars: RFC 3986 §2.3.
	unreservedChars charClass
)

func init() {
	tokenChars.addRange('0', '9')
	tokenChars.addRange('a', 'z')
	tokenChars.addRange('A', 'Z')
	tokenChars.add("!#$%&'*+-.^_`|~")

	valueChars.addRange(0x21, 0x7e)
	valueChars.addRange(0x80, 0xff)
	valueChars.add(" \t")

	targetChars.addRange(0x21, 0x7e)
	targetChars.addRange(0x80, 0xff)
	targetChars['#'] = false

	unreservedChars.addRange('0', '9')
	unreservedChars.addRange('a', 'z')
	unreservedChars.addRange('A', 'Z')
	unreservedChars.add("-._~")

	hostChars = unreservedChars
	hostChars.add("!$&'()*+,;=")
}

// IsToken reports whether s is a token (RFC 9110 §5.6.2): what a method
// and a field name must be.
func IsToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !tokenChars[s[i]] {
			return false
		}
	}
	return s != ""
}

func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !tokenChars[c] {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// unhex returns the value of a hex digit, or -1.
func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// lower returns c in lower case, for ASCII letters.
func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// EqualFold reports whether b equals the lower-case ASCII string s,
// ignoring case.
func EqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		if lower(b[i]) != s[i] {
			return false
		}
	}
	return true
}

// equalFoldBytes reports whether a and b are equal, ignoring ASCII case.
func equalFoldBytes(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if lower(a[i]) != lower(b[i]) {
			return false
		}
	}
	return true
}

// trimOWS removes optional whitespace (SP, HTAB) from both ends.
func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}
