package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// listenBacklog is the accept queue asked of the kernel, which caps it at
// net.core.somaxconn. A deep queue is what lets clients wait, instead of
// being refused, while a slot's worker restarts.
const listenBacklog = 65535

// socketTable owns every listening socket. Sockets are reference counted by
// the plans (one per generation) that use them, and closed when the last
// plan using them is released: a listener removed from the config closes
// only once the generations that served it have exited.
//
// A group is a listener's set of sockets: one, or N in a SO_REUSEPORT group.
// A group never changes size while it lives: closing a member resets the
// connections queued on it, and a member opened for a generation that then
// fails would have to be closed the same way.
type socketTable struct {
	groups map[string]*group // by network and address
	// inherit returns a socket a previous supervisor handed over (a
	// self-upgrade), or nil. Nil: nothing is inherited.
	inherit func(name string) (*os.File, error)
	// activated are the sockets systemd passed, adopted by the listener
	// they belong to.
	activated []*activated
}

// fileName names socket i of a group for a self-upgrade.
func fileName(key string, i int) string { return fmt.Sprintf("listener %s %d", key, i) }

type group struct {
	external  bool // sockets systemd owns: their files are not ours to remove
	key       string
	network   string
	address   string
	reusePort bool
	sockets   []*socket
}

type socket struct {
	file *os.File
	refs int
}

// plan is the set of sockets one generation uses, listener by listener.
type plan struct {
	listeners []plannedListener
}

type plannedListener struct {
	spec  ListenerSpec
	group *group
}

func newSocketTable() *socketTable {
	return &socketTable{groups: make(map[string]*group)}
}

// acquire returns the sockets for specs, opening what is missing, and takes a
// reference on each. On error nothing changes.
func (t *socketTable) acquire(specs []ListenerSpec, workers int) (*plan, error) {
	p := &plan{}
	var opened []*group
	undo := func() {
		for _, g := range opened {
			g.retire()
			delete(t.groups, g.key)
		}
	}
	for _, spec := range specs {
		key := spec.Network + " " + spec.Address
		if strings.HasSuffix(spec.Address, ":0") {
			// Port 0 binds a new port each time: the name tells groups apart.
			key += " " + spec.Name
		}
		g := t.groups[key]
		want := spec.Sockets
		if !spec.ReusePort {
			want = 1
		}
		if g == nil {
			var err error
			g, err = t.inheritGroup(key, spec)
			if err != nil {
				undo()
				return nil, fmt.Errorf("listener %s: %w", spec.Name, err)
			}
		}
		if g == nil {
			g = t.adoptActivated(key, spec)
		}
		if g == nil {
			if want == 0 {
				want = workers
			}
			var err error
			g, err = openGroup(key, spec, want)
			if err != nil {
				undo()
				return nil, fmt.Errorf("listener %s: %w", spec.Name, err)
			}
			t.groups[key] = g
			opened = append(opened, g)
		} else {
			if g.reusePort != spec.ReusePort {
				undo()
				return nil, fmt.Errorf("listener %s: %s is open with reusePort: %t; changing it needs a restart of baton", spec.Name, spec.Address, g.reusePort)
			}
			if want != 0 && want != len(g.sockets) {
				undo()
				return nil, fmt.Errorf("listener %s: the reuseport group of %s has %d sockets; resizing it needs a restart of baton (a socket leaving a live group resets the connections queued on it)", spec.Name, spec.Address, len(g.sockets))
			}
		}
		p.listeners = append(p.listeners, plannedListener{spec: spec, group: g})
	}
	for _, pl := range p.listeners {
		for _, s := range pl.group.sockets {
			s.refs++
		}
	}
	return p, nil
}

// release drops p's references and closes the sockets no plan uses.
func (t *socketTable) release(p *plan) {
	if p == nil {
		return
	}
	for _, pl := range p.listeners {
		g := pl.group
		for _, s := range g.sockets {
			s.refs--
		}
		if g.sockets[0].refs == 0 {
			g.retire()
			delete(t.groups, g.key)
		}
	}
}

// inheritGroup takes over the sockets of a group that the previous
// supervisor handed over, as many as it had; nil when there are none.
func (t *socketTable) inheritGroup(key string, spec ListenerSpec) (*group, error) {
	if t.inherit == nil {
		return nil, nil
	}
	g := &group{key: key, network: spec.Network, address: spec.Address, reusePort: spec.ReusePort}
	for i := 0; ; i++ {
		f, err := t.inherit(fileName(key, i))
		if err != nil {
			g.close()
			return nil, fmt.Errorf("inherit socket %d of %s: %w", i, spec.Address, err)
		}
		if f == nil {
			break
		}
		g.sockets = append(g.sockets, &socket{file: f})
	}
	if len(g.sockets) == 0 {
		return nil, nil
	}
	if spec.Network != "unix" {
		bound, err := localAddr(g.sockets[0].file)
		if err != nil {
			g.close()
			return nil, err
		}
		g.address = bound
	}
	t.groups[key] = g
	return g, nil
}

// files returns every socket by its upgrade name.
func (t *socketTable) files() map[string]*os.File {
	m := make(map[string]*os.File)
	for key, g := range t.groups {
		for i, s := range g.sockets {
			m[fileName(key, i)] = s.file
		}
	}
	return m
}

// closeAll closes every socket, referenced or not; with unlink, the unix
// sockets' files go too (not after an upgrade: the next supervisor serves
// them).
func (t *socketTable) closeAll(unlink bool) {
	for k, g := range t.groups {
		if unlink {
			g.retire()
		} else {
			g.close()
		}
		delete(t.groups, k)
	}
}

func (g *group) close() {
	for _, s := range g.sockets {
		s.file.Close()
	}
}

// retire closes the group for good: a unix socket's file is removed.
func (g *group) retire() {
	g.close()
	if g.network == "unix" && !g.external && !strings.HasPrefix(g.address, "@") {
		os.Remove(g.address)
	}
}

// openGroup opens n listening sockets on spec's address; with reusePort they
// form one SO_REUSEPORT group.
func openGroup(key string, spec ListenerSpec, n int) (*group, error) {
	g := &group{key: key, network: spec.Network, address: spec.Address, reusePort: spec.ReusePort}
	for i := range n {
		f, err := listen(spec.Network, spec.Address, spec.ReusePort)
		if err != nil {
			g.close()
			return nil, err
		}
		if i == 0 && spec.Network != "unix" {
			// Port 0: the rest of the group binds the port the kernel chose.
			bound, err := localAddr(f)
			if err != nil {
				f.Close()
				g.close()
				return nil, err
			}
			g.address = bound
			spec.Address = bound
		}
		g.sockets = append(g.sockets, &socket{file: f})
	}
	return g, nil
}

// listen opens one listening socket, non-blocking and close-on-exec. It is
// non-blocking for every process that shares it: the descriptors handed to
// workers refer to this same open file.
func listen(network, address string, reusePort bool) (*os.File, error) {
	var (
		family int
		sa     unix.Sockaddr
	)
	switch network {
	case "unix":
		family, sa = unix.AF_UNIX, &unix.SockaddrUnix{Name: address}
		if !strings.HasPrefix(address, "@") {
			if err := removeStaleUnixSocket(address); err != nil {
				return nil, err
			}
		}
	case "tcp", "tcp4", "tcp6":
		ap, err := resolveTCP(network, address)
		if err != nil {
			return nil, err
		}
		if ap.Addr().Is4() {
			family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
		} else {
			family, sa = unix.AF_INET6, &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
		}
	default:
		return nil, fmt.Errorf("listen %s %s: unsupported network", network, address)
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("listen %s %s: socket: %w", network, address, err)
	}
	fail := func(op string, err error) (*os.File, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("listen %s %s: %s: %w", network, address, op, err)
	}
	if family != unix.AF_UNIX {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
			return fail("SO_REUSEADDR", err)
		}
		if reusePort {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
				return fail("SO_REUSEPORT", err)
			}
		}
		if family == unix.AF_INET6 && network == "tcp6" {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
				return fail("IPV6_V6ONLY", err)
			}
		}
	}
	if err := unix.Bind(fd, sa); err != nil {
		return fail("bind", err)
	}
	if err := unix.Listen(fd, listenBacklog); err != nil {
		return fail("listen", err)
	}
	return os.NewFile(uintptr(fd), fmt.Sprintf("listener %s %s", network, address)), nil
}

// resolveTCP turns host:port into an address to bind. An empty host binds
// every address: IPv6 and IPv4 for "tcp", IPv4 for "tcp4".
func resolveTCP(network, address string) (netip.AddrPort, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return netip.AddrPort{}, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port %q: %w", portStr, err)
	}
	if host == "" {
		if network == "tcp4" {
			return netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port)), nil
		}
		return netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(port)), nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return netip.AddrPortFrom(ip.Unmap(), uint16(port)), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", host)
	if err != nil || len(ips) == 0 {
		return netip.AddrPort{}, fmt.Errorf("resolve %s: %w", host, err)
	}
	return netip.AddrPortFrom(ips[0].Unmap(), uint16(port)), nil
}

// localAddr returns the address a TCP socket is bound to, as host:port.
func localAddr(f *os.File) (string, error) {
	var sa unix.Sockaddr
	err := control(f, func(fd int) (err error) {
		sa, err = unix.Getsockname(fd)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("getsockname: %w", err)
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)).String(), nil
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)).String(), nil
	}
	return "", fmt.Errorf("getsockname: unexpected %T", sa)
}

// removeStaleUnixSocket removes a unix socket file that nothing listens on.
func removeStaleUnixSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return fmt.Errorf("%s: another process is listening on it", path)
	}
	return os.Remove(path)
}

// control runs fn on f's descriptor without changing its blocking mode (as
// File.Fd would, for every process sharing the socket).
// dupFile returns a close-on-exec duplicate of f, without touching f's
// blocking mode (which workers share).
func dupFile(f *os.File) (*os.File, error) {
	var nfd int
	err := control(f, func(fd int) (err error) {
		nfd, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(nfd), f.Name()), nil
}

func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// queueDepth returns the length of a TCP listening socket's accept queue
// and its limit, as TCP_INFO reports them for listeners.
func queueDepth(f *os.File) (depth, limit int, err error) {
	err = control(f, func(fd int) error {
		info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return err
		}
		depth, limit = int(info.Unacked), int(info.Sacked)
		return nil
	})
	return depth, limit, err
}

// socketsForSlot maps worker slots onto a group's sockets so that every
// socket has at least one worker: with more sockets than workers, slot s
// takes sockets s, s+W, s+2W...; with fewer, slots share sockets round robin.
func socketsForSlot(slot, workers, sockets int) []int {
	if sockets <= workers {
		return []int{slot % sockets}
	}
	var idx []int
	for i := slot; i < sockets; i += workers {
		idx = append(idx, i)
	}
	return idx
}
