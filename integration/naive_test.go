package integration

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// helperEnv makes the test binary act as a process of its own.
const helperEnv = "BATON_TEST_HELPER"

func init() {
	if os.Getenv(helperEnv) == "reuseport-listener" {
		os.Exit(reuseportListener(os.Args[len(os.Args)-1]))
	}
}

// reuseportListener joins the reuseport group on port, never accepts, says
// so on stdout, and exits when stdin closes: the old member of a group that
// "just exits" after its successor started.
func reuseportListener(port string) int {
	fd, err := reuseportSocket(port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = fd
	fmt.Println("listening")
	io.Copy(io.Discard, os.Stdin)
	return 0
}

func reuseportSocket(port string) (int, error) {
	p, err := strconv.Atoi(port)
	if err != nil {
		return -1, err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: p, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return -1, err
	}
	return fd, unix.Listen(fd, 1024)
}

// TestNaiveReuseportHandoffResetsConnections keeps our own claim honest: it
// shows what baton avoids. Two processes share a port through SO_REUSEPORT
// (old and new generation, the tableflip-less way); connections the kernel
// queued on the old one's socket are reset when it exits, though they were
// accepted by the kernel and a new process serves the port.
func TestNaiveReuseportHandoffResetsConnections(t *testing.T) {
	// The new process: a reuseport member that accepts and answers.
	newFD, err := reuseportSocket("0")
	if err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(newFD)
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(sa.(*unix.SockaddrInet4).Port)
	newLn, err := net.FileListener(os.NewFile(uintptr(newFD), "new"))
	if err != nil {
		t.Fatal(err)
	}
	defer newLn.Close()
	go func() {
		for {
			c, err := newLn.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hi"))
			c.Close()
		}
	}()

	// The old process: a member of the same group that stops accepting.
	old := exec.Command(os.Args[0], "-test.run=^$", port)
	old.Env = append(os.Environ(), helperEnv+"=reuseport-listener")
	stdin, _ := old.StdinPipe()
	stdout, _ := old.StdoutPipe()
	old.Stderr = os.Stderr
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "listening\n" {
		t.Fatalf("helper: %q %v", line, err)
	}

	// Clients connect; the kernel completes every handshake and spreads
	// the connections over both sockets.
	const clients = 64
	var conns []net.Conn
	for range clients {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	// The old process exits, as a naive handoff's old generation does.
	stdin.Close()
	if err := old.Wait(); err != nil {
		t.Fatal(err)
	}
	served, reset := 0, 0
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c)
		c.Close()
		switch {
		case err == nil && string(b) == "hi":
			served++
		case errors.Is(err, syscall.ECONNRESET):
			reset++
		default:
			t.Errorf("client: %q %v", b, err)
		}
	}
	t.Logf("naive reuseport handoff: %d of %d connections reset, %d served", reset, clients, served)
	if reset == 0 {
		t.Errorf("no connection was reset: the kernel queued all %d on the surviving socket (odds 2^-%d), or its behaviour changed", clients, clients)
	}
	if served+reset != clients {
		t.Errorf("served %d + reset %d != %d", served, reset, clients)
	}
}
