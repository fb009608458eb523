package supervisor

import "testing"

// A listener's address need not be on an interface with FreeBind
// (IP_FREEBIND): a Gateway's address from a pool routed to the host. Without
// it, binding such an address fails, as before.
func TestListenFreeBind(t *testing.T) {
	const addr = "198.18.250.7:0" // on no interface of a test machine
	if f, err := listen("tcp4", addr, true, false); err == nil {
		f.Close()
		t.Skip("198.18.250.7 is on an interface here")
	}
	f, err := listen("tcp4", addr, true, true)
	if err != nil {
		t.Fatalf("with FreeBind: %v", err)
	}
	f.Close()
}
