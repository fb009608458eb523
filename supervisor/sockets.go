package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/baton-proxy/baton/internal/sockfd"
	"github.com/baton-proxy/baton/internal/steer"
	"go.uber.org/zap"
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
// Generations share the group's current sockets. Where BPF can steer the
// group (internal/steer), a generation may instead get sockets of its own in
// the same group: a canary, or a new size (sockets or workers changed). The
// steering table then sends new connections only to the sockets of the
// serving generations, and a socket that no serving generation holds is
// closed as soon as its generation drains: the kernel migrates what was
// queued on it to a steered socket, so nothing is reset. Without steering a
// group never changes size: closing a member would reset the connections
// queued on it.
type socketTable struct {
	groups map[string]*group // by network and address
	// inherit returns a socket a previous supervisor handed over (a
	// self-upgrade), or nil. Nil: nothing is inherited.
	inherit func(name string) (*os.File, error)
	// activated are the sockets systemd passed, adopted by the listener
	// they belong to.
	activated []*activated
	// newSteer loads a steering program for a group; nil: never steer.
	newSteer func() (*steer.Group, error)
	log      *zap.Logger
}

// fileName names socket i of a group for a self-upgrade.
func fileName(key string, i int) string { return fmt.Sprintf("listener %s %d", key, i) }

type group struct {
	external  bool // sockets systemd owns: their files are not ours to remove
	key       string
	network   string
	address   string
	reusePort bool
	freeBind  bool      // bound with IP_FREEBIND (ListenerSpec.FreeBind)
	sockets   []*socket // every open socket, in the order opened
	current   []*socket // the ones a new generation shares
	// steer chooses the socket of each new connection; nil when the
	// kernel's hash does, for steerErr.
	steer    *steer.Group
	steerErr error
}

type socket struct {
	file    *os.File
	refs    int  // plans holding it
	serving int  // plans of generations not draining holding it
	slot    int  // in the steering program's sockarray
	steered bool // the steering table names it
	closed  bool // closed early: only draining generations held it
}

// plan is the set of sockets one generation uses, listener by listener.
type plan struct {
	listeners []plannedListener
}

type plannedListener struct {
	spec    ListenerSpec
	group   *group
	sockets []*socket // the group's sockets this generation accepts on
	// slots: a canary sharing the group's current sockets, where BPF
	// cannot steer; it takes its share by accepting on some of them only
	// (canary.go).
	slots bool
}

func newSocketTable() *socketTable {
	return &socketTable{groups: make(map[string]*group), log: zap.NewNop()}
}

// acquire returns the sockets for specs, opening what is missing, and takes a
// reference on each. With own, every listener gets sockets of its own (a
// canary), which needs steering. On error nothing changes.
func (t *socketTable) acquire(specs []ListenerSpec, workers int, own bool) (*plan, error) {
	p := &plan{}
	var opened []*group
	type extra struct {
		g     *group
		socks []*socket
	}
	var extras []extra
	undo := func() {
		for _, e := range extras {
			e.g.drop(e.socks)
		}
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
		if g != nil && g.current == nil {
			// Handed over (an upgrade, systemd) and not yet used: taken as
			// it is, as when it was opened.
			if g.reusePort != spec.ReusePort || (spec.Sockets != 0 && spec.Sockets != len(g.sockets)) {
				undo()
				return nil, fmt.Errorf("listener %s: %s was handed over with %d sockets (reusePort: %t); the config asks for %d (reusePort: %t), which needs a restart of baton", spec.Name, spec.Address, len(g.sockets), g.reusePort, want, spec.ReusePort)
			}
			t.startSteering(g)
			p.listeners = append(p.listeners, plannedListener{spec: spec, group: g, sockets: g.current})
			continue
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
			t.startSteering(g)
			if own {
				// A canary needs an active generation beside it.
				undo()
				return nil, fmt.Errorf("listener %s: a canary serves the active generation's listeners; %s is new (reload without --canary first)", spec.Name, spec.Address)
			}
			p.listeners = append(p.listeners, plannedListener{spec: spec, group: g, sockets: g.current})
			continue
		}
		if g.reusePort != spec.ReusePort {
			undo()
			return nil, fmt.Errorf("listener %s: %s is open with reusePort: %t; changing it needs a restart of baton", spec.Name, spec.Address, g.reusePort)
		}
		if want == 0 && g.steer != nil {
			want = workers // one socket per worker, on every reload
		}
		resize := want != 0 && want != len(g.current)
		if !own && !resize {
			p.listeners = append(p.listeners, plannedListener{spec: spec, group: g, sockets: g.current})
			continue
		}
		if g.steer == nil {
			tcpGroup := g.reusePort && g.network != "unix"
			switch {
			case own && !resize && tcpGroup && len(g.current) >= 2:
				// Slots: the canary takes some of the group's sockets.
				p.listeners = append(p.listeners, plannedListener{spec: spec, group: g, sockets: g.current, slots: true})
				continue
			case own && !resize && tcpGroup:
				undo()
				return nil, fmt.Errorf("listener %s: a canary needs sockets of its own on %s (%s), or at least 2 sockets in its group to take some of (it has %d)", spec.Name, spec.Address, g.steerReason(), len(g.current))
			case own:
				undo()
				return nil, fmt.Errorf("listener %s: a canary needs sockets of its own on %s, which needs %s", spec.Name, spec.Address, g.steerReason())
			}
			undo()
			return nil, fmt.Errorf("listener %s: the reuseport group of %s has %d sockets; resizing it to %d needs %s, or a restart of baton (a socket leaving a live group resets the connections queued on it)", spec.Name, spec.Address, len(g.current), want, g.steerReason())
		}
		if want == 0 {
			want = len(g.current)
		}
		socks, err := g.open(want)
		if err != nil {
			undo()
			return nil, fmt.Errorf("listener %s: %w", spec.Name, err)
		}
		extras = append(extras, extra{g, socks})
		p.listeners = append(p.listeners, plannedListener{spec: spec, group: g, sockets: socks})
	}
	for _, pl := range p.listeners {
		for _, s := range pl.sockets {
			s.refs++
			s.serving++
		}
	}
	return p, nil
}

// steerReason says why a group cannot be steered.
func (g *group) steerReason() string {
	switch {
	case !g.reusePort:
		return "reusePort: true (it is a single socket)"
	case g.network == "unix":
		return "a TCP listener (unix sockets have no reuseport groups)"
	case g.external:
		return "sockets baton opens (systemd passed these)"
	case g.steerErr != nil:
		return fmt.Sprintf("BPF steering, unavailable here: %v", g.steerErr)
	}
	return "BPF steering"
}

// startSteering attaches a steering program to a new TCP reuseport group
// and steers to all its sockets; where BPF cannot be used the group goes
// on without, and says why.
func (t *socketTable) startSteering(g *group) {
	g.current = g.sockets
	if !g.reusePort || g.network == "unix" || g.external || t.newSteer == nil {
		return
	}
	st, err := t.newSteer()
	if err == nil {
		err = st.Attach(g.sockets[0].file)
		for i, s := range g.sockets {
			if err != nil {
				break
			}
			s.slot = i
			err = st.Add(i, s.file)
		}
		if err != nil {
			st.Close()
		}
	}
	if err != nil {
		g.steerErr = err
		t.log.Warn("listener: no BPF steering; the kernel's hash spreads connections, and canaries and resizing are refused", zap.String("address", g.address), zap.Error(err))
		return
	}
	g.steer = st
	if err := g.steerTo(g.current, nil, 0); err != nil {
		t.log.Error("listener: steering", zap.String("address", g.address), zap.Error(err))
	}
}

// open adds n sockets to a steered group, each in a free slot of its
// sockarray. They take no connection until steered to.
func (g *group) open(n int) ([]*socket, error) {
	used := make(map[int]bool, len(g.sockets))
	for _, s := range g.sockets {
		used[s.slot] = true
	}
	next := 0
	var socks []*socket
	for range n {
		for used[next] {
			next++
		}
		if next >= steer.MaxSockets {
			g.drop(socks)
			return nil, fmt.Errorf("the reuseport group of %s would have more than %d sockets", g.address, steer.MaxSockets)
		}
		f, err := listen(g.network, g.address, true, g.freeBind)
		if err == nil {
			err = g.steer.Add(next, f)
			if err != nil {
				f.Close()
			}
		}
		if err != nil {
			g.drop(socks)
			return nil, fmt.Errorf("open a socket on %s: %w", g.address, err)
		}
		s := &socket{file: f, slot: next}
		used[next] = true
		socks = append(socks, s)
		g.sockets = append(g.sockets, s)
	}
	return socks, nil
}

// drop closes socks, which no plan holds, and forgets them.
func (g *group) drop(socks []*socket) {
	for _, s := range socks {
		if !s.closed {
			s.file.Close()
			s.closed = true
		}
	}
	g.sockets = slices.DeleteFunc(g.sockets, func(s *socket) bool { return slices.Contains(socks, s) })
	g.current = slices.DeleteFunc(slices.Clone(g.current), func(s *socket) bool { return slices.Contains(socks, s) })
}

// steerTo sends new connections to active's sockets, and permil of them
// to canary's when canary is not empty.
func (g *group) steerTo(active, canary []*socket, permil int) error {
	if len(canary) == 0 {
		permil = 0
	}
	slots := func(socks []*socket) []int {
		var out []int
		for _, s := range socks {
			out = append(out, s.slot)
		}
		return out
	}
	err := g.steer.Steer(steer.Share{Slots: slots(active), Permil: steer.TableSize - permil}, steer.Share{Slots: slots(canary), Permil: permil})
	for _, s := range g.sockets {
		s.steered = slices.Contains(active, s) || (permil > 0 && slices.Contains(canary, s))
	}
	return err
}

// commit makes p's sockets the ones new generations share: p's generation
// is the active one.
func (t *socketTable) commit(p *plan) {
	for _, pl := range p.listeners {
		pl.group.current = pl.sockets
	}
}

// steer sends the new connections of every steered group to the sockets of
// active, and permil of them to canary's (nil: none).
func (t *socketTable) steer(active, canary *plan, permil int) {
	for _, g := range t.groups {
		if g.steer == nil {
			continue
		}
		a, c := active.socketsOf(g), canary.socketsOf(g)
		if a == nil {
			a, c = c, nil
		}
		if a == nil {
			continue
		}
		if err := g.steerTo(a, c, permil); err != nil {
			t.log.Error("listener: steering", zap.String("address", g.address), zap.Error(err))
		}
	}
}

// socketsOf returns the sockets p holds in g; nil when none.
func (p *plan) socketsOf(g *group) []*socket {
	if p == nil {
		return nil
	}
	for _, pl := range p.listeners {
		if pl.group == g {
			return pl.sockets
		}
	}
	return nil
}

// draining tells the table that p's generation drains: a steered socket
// that no serving generation holds any more, and that the table no longer
// names, is closed now. Its workers close their copies as they drain, and
// the kernel migrates what was queued on it to a steered socket.
func (t *socketTable) draining(p *plan) {
	if p == nil {
		return
	}
	for _, pl := range p.listeners {
		for _, s := range pl.sockets {
			s.serving--
			if s.serving == 0 && !s.steered && pl.group.steer != nil && !s.closed {
				s.file.Close()
				s.closed = true
			}
		}
	}
}

// release drops p's references and closes the sockets no plan uses; a
// group with no socket left is gone. Sockets of a generation that never
// served (it failed) may still count as serving: they go all the same.
func (t *socketTable) release(p *plan) {
	if p == nil {
		return
	}
	for _, pl := range p.listeners {
		g := pl.group
		var unused []*socket
		for _, s := range pl.sockets {
			s.refs--
			if s.refs == 0 {
				unused = append(unused, s)
			}
		}
		g.drop(unused)
		if len(g.sockets) == 0 {
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

// files returns every open socket of the groups by its upgrade name (the
// current ones: an upgrade waits for a canary or a resize to finish).
func (t *socketTable) files() map[string]*os.File {
	m := make(map[string]*os.File)
	for key, g := range t.groups {
		for i, s := range g.current {
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
		if !s.closed {
			s.file.Close()
			s.closed = true
		}
	}
	if g.steer != nil {
		g.steer.Close()
		g.steer = nil
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
	g := &group{key: key, network: spec.Network, address: spec.Address, reusePort: spec.ReusePort, freeBind: spec.FreeBind}
	for i := range n {
		f, err := listen(spec.Network, spec.Address, spec.ReusePort, spec.FreeBind)
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
func listen(network, address string, reusePort, freeBind bool) (*os.File, error) {
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
	// Blocking until it is wrapped (unpolled).
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
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
		if freeBind {
			// One option for both families (IP_FREEBIND, which IPv6
			// sockets honour too).
			if err := unix.SetsockoptInt(fd, unix.SOL_IP, unix.IP_FREEBIND, 1); err != nil {
				return fail("IP_FREEBIND", err)
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
	f, err := unpolled(fd, fmt.Sprintf("listener %s %s", network, address))
	if err != nil {
		return nil, fmt.Errorf("listen %s %s: %w", network, address, err)
	}
	return f, nil
}

// unpolled wraps the listening socket fd, which no process accepts on
// yet, in an *os.File that the runtime's poller does not watch, and makes
// it non-blocking for the workers. The supervisor never accepts on a
// listening socket, and os.NewFile puts a non-blocking descriptor in the
// poller's epoll set, which then woke the supervisor at every connection
// queued for the workers (13,107 epoll waits and 0.42 s of its CPU over
// 5 s of 5,400 new connections a second: docs/design.md). Wrapped while
// blocking, the file is not pollable. The mode belongs to the open file
// that every holder of the socket shares, which is why nothing may accept
// on it meanwhile. fd is the file's, or closed on an error.
func unpolled(fd int, name string) (*os.File, error) {
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("clear O_NONBLOCK: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if err := unix.SetNonblock(fd, true); err != nil {
		f.Close()
		return nil, fmt.Errorf("set O_NONBLOCK: %w", err)
	}
	return f, nil
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
	err := sockfd.Control(f, func(fd int) (err error) {
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

// queueDepth returns the length of a TCP listening socket's accept queue
// and its limit, as TCP_INFO reports them for listeners.
func queueDepth(f *os.File) (depth, limit int, err error) {
	err = sockfd.Control(f, func(fd int) error {
		info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return err
		}
		depth, limit = int(info.Unacked), int(info.Sacked)
		return nil
	})
	return depth, limit, err
}

// helpedSockets returns the sockets of a group of n that a slot does not
// own (own, from socketsForSlot), which its worker accepts on as a helper: a
// connection the steering (BPF's turns, or the kernel's hash) gave a
// worker that is busy, stopped or off its core is taken by another that
// is free, as from nginx's one shared socket, while the group keeps its
// sockets per generation for canaries and resizes. The worker takes from
// them one connection at a time (proxy's rawListener), so that the first
// to wake does not take a whole burst.
func helpedSockets(own []int, n int) []int {
	var idx []int
	for i := range n {
		if !slices.Contains(own, i) {
			idx = append(idx, i)
		}
	}
	return idx
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
