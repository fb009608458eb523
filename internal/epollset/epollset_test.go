package epollset

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestWatched(t *testing.T) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ep)
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, p[0], &unix.EpollEvent{Events: unix.EPOLLIN}); err != nil {
		t.Fatal(err)
	}
	w, err := Watched(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !w[p[0]] || w[p[1]] {
		t.Errorf("watched %v: want %d in, %d out", w, p[0], p[1])
	}
	if _, err := Watched(1 << 30); err == nil || errors.Is(err, ErrNone) {
		t.Errorf("a process that does not exist: %v", err)
	}
}
