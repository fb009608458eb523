package ipc

import (
	"bytes"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A routing payload travels in a sealed file, whatever its size (past a
// packet's bound here): the worker gets what was sent, the one received
// before it asked, and each new one after.
func TestRoutingTravelsInASealedFile(t *testing.T) {
	sup, end := newPair(t)
	if err := sup.Send(TypeHello, Hello{Generation: 1, Routing: true}); err != nil {
		t.Fatal(err)
	}
	w, err := ConnectFile(end)
	end.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if !w.Hello().Routing {
		t.Fatal("the hello lost Routing")
	}
	send := func(payload []byte) {
		t.Helper()
		f, err := RoutingFile(payload)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := sup.Send(TypeRouting, Routing{Size: int64(len(payload))}, f); err != nil {
			t.Fatal(err)
		}
	}
	first := bytes.Repeat([]byte("r"), 2*MaxFrame)
	send(first)
	got := make(chan []byte, 2)
	// Registered after the first arrived (or while): it gets it all the same.
	for deadline := time.Now().Add(5 * time.Second); ; {
		w.routingMu.Lock()
		arrived := w.routing != nil
		w.routingMu.Unlock()
		if arrived || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	w.OnRouting(func(p []byte, _ uint64) { got <- p })
	second := []byte(`{"rules":[]}`)
	send(second)
	for i, want := range [][]byte{first, second} {
		select {
		case p := <-got:
			if !bytes.Equal(p, want) {
				t.Fatalf("payload %d: %d bytes, want %d", i, len(p), len(want))
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("payload %d not delivered", i)
		}
	}
}

// A routing file that is not sealed against writes (one another process
// could change under the worker) is refused: the connection ends.
func TestRoutingFileMustBeSealed(t *testing.T) {
	sup, end := newPair(t)
	if err := sup.Send(TypeHello, Hello{Generation: 1}); err != nil {
		t.Fatal(err)
	}
	w, err := ConnectFile(end)
	end.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "unsealed")
	defer f.Close()
	f.Write([]byte("{}"))
	if err := sup.Send(TypeRouting, Routing{Size: 2}, f); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Draining():
	case <-time.After(10 * time.Second):
		t.Fatal("an unsealed routing file was taken")
	}
}
