package supervisor

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/baton-proxy/baton/internal/epollset"
	"github.com/baton-proxy/baton/internal/sockfd"
	"golang.org/x/sys/unix"
)

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

// The supervisor holds the listening sockets for its workers and never
// accepts on them: they must not be in the runtime poller's epoll set,
// where every connection queued on them would wake the supervisor (12 us
// of its CPU a connection, measured in docs/design.md). They must still be
// non-blocking, for the workers that share them.
func TestListenerNotPolled(t *testing.T) {
	// A pollable socket first, so that the runtime's poller exists.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, network := range []string{"tcp", "unix"} {
		addr := "127.0.0.1:0"
		if network == "unix" {
			addr = filepath.Join(t.TempDir(), "l.sock")
		}
		f, err := listen(network, addr, false, false)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var fd, flags int
		if err := sockfd.Control(f, func(d int) (err error) {
			fd = d
			flags, err = unix.FcntlInt(uintptr(d), unix.F_GETFL, 0)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if flags&unix.O_NONBLOCK == 0 {
			t.Errorf("%s listener: blocking; the workers' accept4 would block", network)
		}
		watched, err := epollset.Watched(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if watched[fd] {
			t.Errorf("%s listener: descriptor %d is in the runtime poller's epoll set", network, fd)
		}
	}
}
