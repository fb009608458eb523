package ipc

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/baton-proxy/baton/internal/sockfd"
)

// EnvFD names the environment variable that holds the number of the
// descriptor on which a worker reaches its supervisor.
const EnvFD = "BATON_IPC_FD"

// HelloTimeout bounds how long Connect waits for the supervisor's hello.
const HelloTimeout = 30 * time.Second

// Worker is a worker's side of the protocol: the hello it received, its
// listeners, and the way to say ready and to learn when to drain.
type Worker struct {
	mu             sync.Mutex // protects conn, ready, acks, orphanLn, tickets and onTickets
	conn           *Conn      // to the supervisor; a new one after an adoption
	ready          bool       // Ready was sent: the worker serves
	acks           bool       // AckDrains was called: Ready.Acks
	orphanLn       *net.UnixListener
	tickets        [][]byte
	onTickets      func([][]byte)
	pausedMu       sync.Mutex // serializes the deliveries of paused
	paused         map[string][]int
	onPaused       func(map[string][]int)
	routingMu      sync.Mutex // serializes the deliveries of routing
	routing        []byte
	routingVersion uint64
	onRouting      func([]byte, uint64)
	accessLog      *os.File
	onLogFile      func(*os.File)
	closing        chan struct{} // closed by Close

	hello     Hello
	listeners []Listener

	draining  chan struct{} // closed once, when told to drain or the supervisor is gone
	drainOnce sync.Once
	drain     Drain // set before draining is closed
	readDone  chan struct{}
	readErr   error // set before readDone is closed
}

// Listener is one configured listener of a worker: what the supervisor said
// of it, and one net.Listener per socket.
type Listener struct {
	ListenerInfo
	Listeners []net.Listener
}

// Connect joins the supervisor through the descriptor named by $BATON_IPC_FD
// and waits for its hello. The descriptor is closed (Connect keeps a
// close-on-exec duplicate) so that no process the worker starts inherits it.
func Connect() (*Worker, error) {
	v := os.Getenv(EnvFD)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("ipc: $%s=%q does not name a descriptor: not started by baton?", EnvFD, v)
	}
	f := os.NewFile(uintptr(fd), "baton-ipc")
	defer f.Close()
	os.Unsetenv(EnvFD)
	return ConnectFile(f)
}

// ConnectFile is Connect on the socket f. The caller still owns f.
func ConnectFile(f *os.File) (*Worker, error) {
	c, err := FileConn(f)
	if err != nil {
		return nil, err
	}
	w, err := handshake(c)
	if err != nil {
		c.Close()
		return nil, err
	}
	go w.read()
	return w, nil
}

func handshake(c *Conn) (*Worker, error) {
	c.uc.SetReadDeadline(time.Now().Add(HelloTimeout))
	fr, files, err := c.Receive()
	c.uc.SetReadDeadline(time.Time{})
	if err != nil {
		return nil, fmt.Errorf("ipc: waiting for hello: %w", err)
	}
	closeFiles := func() {
		for _, f := range files {
			f.Close()
		}
	}
	defer closeFiles() // listeners below hold duplicates
	if fr.Type != TypeHello {
		return nil, fmt.Errorf("%w: %s before hello", ErrUnexpected, fr.Type)
	}
	w := &Worker{conn: c, draining: make(chan struct{}), readDone: make(chan struct{}), closing: make(chan struct{})}
	if err := fr.Unmarshal(&w.hello); err != nil {
		return nil, err
	}
	w.tickets = w.hello.TicketKeys
	w.paused = w.hello.Paused
	if got, want := len(files), w.hello.Files(); got != want {
		return nil, fmt.Errorf("%w: hello announces %d descriptors, %d came", ErrMalformed, want, got)
	}
	if w.hello.AccessLog {
		// The last descriptor: the worker keeps it.
		w.accessLog = files[len(files)-1]
		files = files[:len(files)-1]
	}
	i := 0
	for _, info := range w.hello.Listeners {
		l := Listener{ListenerInfo: info}
		for range info.Sockets {
			ln, err := net.FileListener(files[i])
			i++
			if err != nil {
				w.closeListeners()
				return nil, fmt.Errorf("ipc: listener %s: %w", info.Name, err)
			}
			l.Listeners = append(l.Listeners, ln)
		}
		w.listeners = append(w.listeners, l)
	}
	return w, nil
}

// read owns the receiving side after the hello. It ends at the supervisor's
// end (unless a new supervisor adopts the worker), at a read error, or when
// Close closes the connection.
func (w *Worker) read() {
	defer close(w.readDone)
	for {
		err := w.receive(w.supervisor())
		if errors.Is(err, io.EOF) && w.orphanable() {
			// The supervisor died while this worker serves: serve on,
			// and wait for a new one to adopt it.
			if c := w.waitAdoption(); c != nil {
				w.mu.Lock()
				w.conn = c
				w.mu.Unlock()
				continue
			}
			w.readErr = nil
			w.startDrain(Drain{Reason: fmt.Sprintf("supervisor gone; no supervisor adopted this worker within %s", w.hello.Orphans.Timeout)})
			return
		}
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
			err = nil
		}
		w.readErr = err
		reason := "supervisor gone"
		if err != nil {
			reason = err.Error()
		}
		w.startDrain(Drain{Reason: reason})
		return
	}
}

// receive handles the supervisor's messages on c until it fails.
func (w *Worker) receive(c *Conn) error {
	for {
		fr, files, err := c.Receive()
		if err == nil && fr.Type == TypeLogFile && len(files) == 1 {
			w.setLogFile(files[0])
			continue
		}
		if err == nil && fr.Type == TypeRouting && len(files) == 1 {
			var r Routing
			err = fr.Unmarshal(&r)
			var payload []byte
			if err == nil {
				payload, err = readRouting(files[0], r)
			}
			files[0].Close()
			if err != nil {
				return err
			}
			w.setRouting(payload, r.Version)
			continue
		}
		for _, f := range files {
			f.Close() // only a hello, a logfile and a routing carry descriptors
		}
		if err == nil && len(files) > 0 {
			err = fmt.Errorf("%w: descriptors with %s", ErrUnexpected, fr.Type)
		}
		if err != nil {
			return err
		}
		switch fr.Type {
		case TypeDrain:
			var d Drain
			if err := fr.Unmarshal(&d); err != nil {
				return err
			}
			w.startDrain(d)
		case TypeTickets:
			var t Tickets
			if err := fr.Unmarshal(&t); err != nil {
				return err
			}
			w.setTickets(t.Keys)
		case TypeAccept:
			var a Accept
			if err := fr.Unmarshal(&a); err != nil {
				return err
			}
			w.setPaused(a.Paused)
		default:
			return fmt.Errorf("%w: %s from the supervisor", ErrUnexpected, fr.Type)
		}
	}
}

// supervisor returns the current connection to the supervisor.
func (w *Worker) supervisor() *Conn {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.conn
}

// orphanable reports whether the worker outlives its supervisor: it was
// asked to (Hello.Orphans), serves, and was not told to drain.
func (w *Worker) orphanable() bool {
	w.mu.Lock()
	ready := w.ready
	w.mu.Unlock()
	select {
	case <-w.draining:
		return false
	case <-w.closing:
		return false
	default:
	}
	return ready && w.hello.Orphans != nil && w.hello.Orphans.Timeout > 0
}

// AdoptionTimeout bounds an adoption's exchange, once a supervisor has
// connected.
const AdoptionTimeout = 10 * time.Second

// waitAdoption listens on the worker's abstract socket until a supervisor
// of the same uid (or root) adopts it, and returns the new connection; nil
// when none did within Hello.Orphans.Timeout, or Close was called.
func (w *Worker) waitAdoption() *Conn {
	o := w.hello.Orphans
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: "@" + fmt.Sprintf("%s/%d", o.Name, os.Getpid()), Net: "unixpacket"})
	if err != nil {
		return nil
	}
	w.mu.Lock()
	w.orphanLn = ln
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.orphanLn = nil
		w.mu.Unlock()
		ln.Close()
	}()
	select {
	case <-w.closing:
		return nil // Close came before the listener was in place
	default:
	}
	ln.SetDeadline(time.Now().Add(o.Timeout))
	for {
		uc, err := ln.AcceptUnix()
		if err != nil {
			return nil // the timeout, or Close
		}
		if c := w.adoptedBy(uc); c != nil {
			return c
		}
	}
}

// adoptedBy runs an adoption on uc: the peer must be root or this
// worker's uid; it gets an Orphan with the listening sockets and answers
// Adopted.
func (w *Worker) adoptedBy(uc *net.UnixConn) *Conn {
	if uid, err := PeerUID(uc); err != nil || (uid != 0 && uid != os.Geteuid()) {
		uc.Close()
		return nil
	}
	c := newConn(uc)
	c.uc.SetDeadline(time.Now().Add(AdoptionTimeout))
	w.mu.Lock()
	acks := w.acks
	w.mu.Unlock()
	o := Orphan{Generation: w.hello.Generation, Slot: w.hello.Slot, Workers: w.hello.Workers, Config: w.hello.Config, TicketKeys: w.TicketKeys(), CanaryOf: w.hello.CanaryOf, Acks: acks}
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, l := range w.listeners {
		info := l.ListenerInfo
		for _, ln := range l.Listeners {
			f, err := dupListener(ln)
			if err != nil {
				c.Close()
				return nil
			}
			files = append(files, f)
		}
		o.Listeners = append(o.Listeners, info)
	}
	if err := c.Send(TypeOrphan, o, files...); err != nil {
		c.Close()
		return nil
	}
	fr, rfiles, err := c.Receive()
	for _, f := range rfiles {
		f.Close()
	}
	if err != nil || fr.Type != TypeAdopted {
		c.Close()
		return nil
	}
	c.uc.SetDeadline(time.Time{})
	return c
}

// dupListener returns a close-on-exec duplicate of a listener's socket,
// without changing its blocking mode.
func dupListener(ln net.Listener) (*os.File, error) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("ipc: %T has no descriptor", ln)
	}
	return sockfd.Dup(sc, "listener")
}

func (w *Worker) startDrain(d Drain) {
	w.drainOnce.Do(func() {
		w.drain = d
		close(w.draining)
	})
}

// TicketKeys returns the TLS session-ticket keys, newest first.
func (w *Worker) TicketKeys() [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.tickets
}

// OnTicketKeys has fn called with the keys at each rotation (from the
// receiving goroutine: fn must not block).
func (w *Worker) OnTicketKeys(fn func([][]byte)) {
	w.mu.Lock()
	w.onTickets = fn
	w.mu.Unlock()
}

func (w *Worker) setTickets(keys [][]byte) {
	w.mu.Lock()
	w.tickets = keys
	fn := w.onTickets
	w.mu.Unlock()
	if fn != nil {
		fn(keys)
	}
}

// OnPaused calls fn with the sockets the worker must not accept on now
// (per listener, indexes as in its Sockets), then with each new set the
// supervisor sends (from the receiving goroutine: fn must not block).
// Calls never overlap, and the last one has the latest set.
func (w *Worker) OnPaused(fn func(map[string][]int)) {
	w.pausedMu.Lock()
	defer w.pausedMu.Unlock()
	w.onPaused = fn
	fn(w.paused)
}

func (w *Worker) setPaused(p map[string][]int) {
	w.pausedMu.Lock()
	defer w.pausedMu.Unlock()
	w.paused = p
	if w.onPaused != nil {
		w.onPaused(p)
	}
}

// OnRouting calls fn with the routing payload received so far, if any,
// then with each new one the supervisor sends, each with its version
// (Routing.Version), from the receiving goroutine, one at a time: fn
// should not hold it up long. A worker whose hello says Routing waits for
// the first before it says ready.
func (w *Worker) OnRouting(fn func(payload []byte, version uint64)) {
	w.routingMu.Lock()
	defer w.routingMu.Unlock()
	w.onRouting = fn
	if w.routing != nil {
		fn(w.routing, w.routingVersion)
	}
}

func (w *Worker) setRouting(p []byte, version uint64) {
	w.routingMu.Lock()
	defer w.routingMu.Unlock()
	w.routing, w.routingVersion = p, version
	if w.onRouting != nil {
		w.onRouting(p, version)
	}
}

// AccessLogFile returns the access log file the supervisor handed over, or
// nil. The caller owns it.
func (w *Worker) AccessLogFile() *os.File {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.accessLog
}

// OnLogFile has fn called with each reopened access log file (from the
// receiving goroutine); fn owns the file.
func (w *Worker) OnLogFile(fn func(*os.File)) {
	w.mu.Lock()
	w.onLogFile = fn
	w.mu.Unlock()
}

func (w *Worker) setLogFile(f *os.File) {
	w.mu.Lock()
	fn := w.onLogFile
	w.mu.Unlock()
	if fn == nil {
		f.Close()
		return
	}
	fn(f)
}

// Hello returns the hello the supervisor sent.
func (w *Worker) Hello() *Hello { return &w.hello }

// Listeners returns the worker's listeners, in the order of the hello.
func (w *Worker) Listeners() []Listener { return w.listeners }

// Ready tells the supervisor that the worker serves. Call it only once every
// listener is being accepted on: the previous generation starts to drain when
// every worker of this one is ready.
func (w *Worker) Ready() error {
	w.mu.Lock()
	w.ready = true
	acks := w.acks
	w.mu.Unlock()
	return w.supervisor().Send(TypeReady, Ready{Acks: acks})
}

// AckDrains promises, before Ready, that the worker calls StoppedAccepting
// once a drain has stopped its every accept (Ready.Acks). The supervisor
// then reports a handoff done only after the old workers have stopped
// accepting.
func (w *Worker) AckDrains() {
	w.mu.Lock()
	w.acks = true
	w.mu.Unlock()
}

// StoppedAccepting tells the supervisor that the worker, draining,
// accepts no more connections, if the drain asked for it (Drain.Ack). It
// does nothing before a drain.
func (w *Worker) StoppedAccepting() error {
	select {
	case <-w.draining:
	default:
		return nil
	}
	if !w.drain.Ack {
		return nil
	}
	return w.supervisor().Send(TypeStopped, Stopped{})
}

// Fail tells the supervisor that the worker cannot serve, and why. The worker
// should exit afterwards.
func (w *Worker) Fail(reason string) error {
	return w.supervisor().Send(TypeFailed, Failed{Reason: reason})
}

// Waiting tells the supervisor what the worker, not ready yet, waits for.
func (w *Worker) Waiting(reason string) error {
	return w.supervisor().Send(TypeWaiting, Waiting{Reason: reason})
}

// SendStats reports the worker's counters.
// While the worker is an orphan, the report is lost (an error).
func (w *Worker) SendStats(s Stats) error { return w.supervisor().Send(TypeStats, s) }

// Draining is closed when the worker must drain: the supervisor said so, or
// it is gone (its end of the socket closed). DrainInfo then says until when.
func (w *Worker) Draining() <-chan struct{} { return w.draining }

// DrainInfo returns the drain order, waiting for it. When the supervisor is
// gone the Deadline is zero: the worker picks its own.
func (w *Worker) DrainInfo() Drain {
	<-w.draining
	return w.drain
}

// Close closes the connection to the supervisor and the worker's listeners,
// and waits for the receiving goroutine. The supervisor sees EOF.
func (w *Worker) Close() error {
	w.mu.Lock()
	select {
	case <-w.closing:
	default:
		close(w.closing)
	}
	if w.orphanLn != nil {
		w.orphanLn.Close()
	}
	c := w.conn
	w.mu.Unlock()
	err := c.Close()
	<-w.readDone
	w.closeListeners()
	return err
}

func (w *Worker) closeListeners() {
	for _, l := range w.listeners {
		for _, ln := range l.Listeners {
			ln.Close()
		}
	}
}
