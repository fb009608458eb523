package ipc

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func newPair(t *testing.T) (*Conn, *os.File) {
	t.Helper()
	c, f, err := NewPair()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); f.Close() })
	return c, f
}

func listenerFile(t *testing.T) (net.Listener, *os.File) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); f.Close() })
	return ln, f
}

func TestHelloCarriesListeners(t *testing.T) {
	sup, end := newPair(t)
	ln, lf := listenerFile(t)
	hello := Hello{Generation: 3, Slot: 0, Workers: 1, Listeners: []ListenerInfo{
		{Name: "web", Network: "tcp4", Address: ln.Addr().String(), Sockets: []int{0}},
	}}
	if err := sup.Send(TypeHello, hello, lf); err != nil {
		t.Fatal(err)
	}
	w, err := ConnectFile(end)
	end.Close() // as the supervisor closes the worker's end once it runs
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Hello().Generation != 3 || len(w.Listeners()) != 1 || len(w.Listeners()[0].Listeners) != 1 {
		t.Fatalf("hello = %+v, listeners = %+v", w.Hello(), w.Listeners())
	}
	// The inherited listener accepts connections made to the original.
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			c.Close()
		}
	}()
	c, err := w.Listeners()[0].Listeners[0].Accept()
	if err != nil {
		t.Fatal(err)
	}
	c.Close()

	if err := w.Ready(); err != nil {
		t.Fatal(err)
	}
	fr, files, err := sup.Receive()
	if err != nil || fr.Type != TypeReady || len(files) != 0 {
		t.Fatalf("Receive = %v %v %v, want ready", fr.Type, files, err)
	}
	deadline := time.Now().Add(time.Minute).Round(0)
	if err := sup.Send(TypeDrain, Drain{Deadline: deadline, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	<-w.Draining()
	if d := w.DrainInfo(); !d.Deadline.Equal(deadline) || d.Reason != "test" {
		t.Fatalf("DrainInfo = %+v", d)
	}
	w.Close()
	if _, _, err := sup.Receive(); err != io.EOF {
		t.Fatalf("after worker Close: %v, want io.EOF", err)
	}
}

func TestWorkerDrainsWhenSupervisorGone(t *testing.T) {
	sup, end := newPair(t)
	if err := sup.Send(TypeHello, Hello{Generation: 1}); err != nil {
		t.Fatal(err)
	}
	w, err := ConnectFile(end)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	sup.Close()
	select {
	case <-w.Draining():
	case <-time.After(10 * time.Second):
		t.Fatal("worker did not notice the supervisor's end")
	}
	if w.DrainInfo().Reason != "supervisor gone" {
		t.Fatalf("reason = %q", w.DrainInfo().Reason)
	}
}

func TestHelloDescriptorCountMismatch(t *testing.T) {
	sup, end := newPair(t)
	_, lf := listenerFile(t)
	hello := Hello{Listeners: []ListenerInfo{{Name: "a", Sockets: []int{0, 1}}}}
	if err := sup.Send(TypeHello, hello, lf); err != nil {
		t.Fatal(err)
	}
	if _, err := ConnectFile(end); !errors.Is(err, ErrMalformed) {
		t.Fatalf("ConnectFile = %v, want ErrMalformed", err)
	}
}

// rawSend writes b as one packet on the worker's end, bypassing Encode.
func rawSend(t *testing.T, end *os.File, b []byte, fds ...int) {
	t.Helper()
	rc, err := end.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	rc.Control(func(fd uintptr) {
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		serr = unix.Sendmsg(int(fd), b, oob, nil, 0)
	})
	if serr != nil {
		t.Fatal(serr)
	}
}

func TestReceiveRejectsBadPackets(t *testing.T) {
	sup, end := newPair(t)
	huge := append(frame("BT", 1, 2, 2, "{}"), make([]byte, MaxFrame)...)
	for _, tt := range []struct {
		name string
		b    []byte
		want error
	}{
		{"garbage", []byte("hello world"), ErrMalformed},
		{"bad json", frame("BT", 1, 2, 2, "{,"), ErrMalformed},
		{"oversized", huge, ErrTooLarge},
	} {
		rawSend(t, end, tt.b)
		if _, _, err := sup.Receive(); !errors.Is(err, tt.want) {
			t.Errorf("%s: Receive = %v, want %v", tt.name, err, tt.want)
		}
	}
	// The connection still works after bad packets.
	good, _ := Encode(TypeReady, Ready{})
	rawSend(t, end, good)
	if fr, _, err := sup.Receive(); err != nil || fr.Type != TypeReady {
		t.Fatalf("after bad packets: %v %v", fr.Type, err)
	}
}

func TestMalformedPacketClosesItsDescriptors(t *testing.T) {
	sup, end := newPair(t)
	_, lf := listenerFile(t)
	before := openFDs(t)
	rc, _ := lf.SyscallConn()
	rc.Control(func(fd uintptr) { rawSend(t, end, []byte("garbage"), int(fd)) })
	if _, files, err := sup.Receive(); !errors.Is(err, ErrMalformed) || files != nil {
		t.Fatalf("Receive = %v %v, want ErrMalformed and no files", files, err)
	}
	if after := openFDs(t); after != before {
		t.Fatalf("open descriptors %d before, %d after: a received descriptor leaked", before, after)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
