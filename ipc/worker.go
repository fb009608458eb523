package ipc

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// EnvFD names the environment variable that holds the number of the
// descriptor on which a worker reaches its supervisor.
const EnvFD = "BATON_IPC_FD"

// HelloTimeout bounds how long Connect waits for the supervisor's hello.
const HelloTimeout = 30 * time.Second

// Worker is a worker's side of the protocol: the hello it received, its
// listeners, and the way to say ready and to learn when to drain.
type Worker struct {
	conn      *Conn
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
	w := &Worker{conn: c, draining: make(chan struct{}), readDone: make(chan struct{})}
	if err := fr.Unmarshal(&w.hello); err != nil {
		return nil, err
	}
	if got, want := len(files), w.hello.Files(); got != want {
		return nil, fmt.Errorf("%w: hello announces %d descriptors, %d came", ErrMalformed, want, got)
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
// end, at a read error, or when Close closes the connection.
func (w *Worker) read() {
	defer close(w.readDone)
	for {
		fr, files, err := w.conn.Receive()
		for _, f := range files {
			f.Close() // only a hello may carry descriptors
		}
		if err == nil && len(files) > 0 {
			err = fmt.Errorf("%w: descriptors with %s", ErrUnexpected, fr.Type)
		}
		if err == nil {
			if fr.Type != TypeDrain {
				err = fmt.Errorf("%w: %s from the supervisor", ErrUnexpected, fr.Type)
			} else {
				var d Drain
				if err = fr.Unmarshal(&d); err == nil {
					w.startDrain(d)
					continue
				}
			}
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

func (w *Worker) startDrain(d Drain) {
	w.drainOnce.Do(func() {
		w.drain = d
		close(w.draining)
	})
}

// Hello returns the hello the supervisor sent.
func (w *Worker) Hello() *Hello { return &w.hello }

// Listeners returns the worker's listeners, in the order of the hello.
func (w *Worker) Listeners() []Listener { return w.listeners }

// Ready tells the supervisor that the worker serves. Call it only once every
// listener is being accepted on: the previous generation starts to drain when
// every worker of this one is ready.
func (w *Worker) Ready() error { return w.conn.Send(TypeReady, Ready{}) }

// Fail tells the supervisor that the worker cannot serve, and why. The worker
// should exit afterwards.
func (w *Worker) Fail(reason string) error {
	return w.conn.Send(TypeFailed, Failed{Reason: reason})
}

// SendStats reports the worker's counters.
func (w *Worker) SendStats(s Stats) error { return w.conn.Send(TypeStats, s) }

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
	err := w.conn.Close()
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
