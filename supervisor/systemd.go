package supervisor

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// listenFDsStart is the first descriptor systemd passes (SD_LISTEN_FDS_START).
const listenFDsStart = 3

// activated is a listening socket systemd passed (socket activation).
type activated struct {
	file *os.File
	name string // FileDescriptorName= of the socket unit
	addr string // what it is bound to: ip:port, or a unix path
	used bool
}

// socketActivation returns the sockets systemd passed to this process
// ($LISTEN_PID, $LISTEN_FDS, $LISTEN_FDNAMES), made non-blocking, and
// removes those variables so that workers do not see them. None when the
// variables are absent or meant for another process.
func socketActivation() ([]*activated, error) {
	pid, err := strconv.Atoi(os.Getenv("LISTEN_PID"))
	if err != nil || pid != os.Getpid() {
		return nil, nil
	}
	n, err := strconv.Atoi(os.Getenv("LISTEN_FDS"))
	if err != nil || n <= 0 {
		return nil, nil
	}
	names := strings.Split(os.Getenv("LISTEN_FDNAMES"), ":")
	for _, v := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
		os.Unsetenv(v)
	}
	var out []*activated
	for i := range n {
		fd := listenFDsStart + i
		unix.CloseOnExec(fd)
		if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || v != 1 {
			return nil, fmt.Errorf("socket activation: descriptor %d is not a listening socket", fd)
		}
		// Nothing accepts on it yet: systemd holds it but does not watch
		// it while the service runs, and no worker has it.
		f, err := unpolled(fd, fmt.Sprintf("systemd socket %d", fd))
		if err != nil {
			return nil, fmt.Errorf("socket activation: descriptor %d: %w", fd, err)
		}
		a := &activated{file: f}
		if i < len(names) {
			a.name = names[i]
		}
		sa, err := unix.Getsockname(fd)
		if err != nil {
			return nil, fmt.Errorf("socket activation: descriptor %d: %w", fd, err)
		}
		switch sa := sa.(type) {
		case *unix.SockaddrInet4:
			a.addr = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port)).String()
		case *unix.SockaddrInet6:
			a.addr = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(sa.Port)).String()
		case *unix.SockaddrUnix:
			a.addr = sa.Name
		}
		out = append(out, a)
	}
	return out, nil
}

// adoptActivated makes a group of the activated sockets that belong to
// spec: those systemd named like the listener, or bound to its address.
// Nil when there are none.
func (t *socketTable) adoptActivated(key string, spec ListenerSpec) *group {
	want := spec.Address
	if spec.Network != "unix" {
		if ap, err := resolveTCP(spec.Network, spec.Address); err == nil && ap.Port() != 0 {
			want = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
		} else {
			want = ""
		}
	}
	g := &group{key: key, network: spec.Network, address: spec.Address, reusePort: spec.ReusePort, external: true}
	for _, a := range t.activated {
		if !a.used && (a.name == spec.Name || (want != "" && a.addr == want)) {
			a.used = true
			g.sockets = append(g.sockets, &socket{file: a.file})
			if spec.Network != "unix" {
				g.address = a.addr
			}
		}
	}
	if len(g.sockets) == 0 {
		return nil
	}
	t.groups[key] = g
	return g
}
