package ipc

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCallTrustsOnlyOurUID: a control socket served by another user (one
// that swapped the socket in a directory it could write) is not believed,
// whatever it answers (issue 8, problem 7).
func TestCallTrustsOnlyOurUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run the fake server as another user")
	}
	dir, err := os.MkdirTemp("", "ipc-peer-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o777)
	helper := filepath.Join(dir, "helper")
	copyExecutable(t, helper)
	sock := filepath.Join(dir, "control.sock")
	cmd := exec.Command(helper, "-test.run=^TestFakeControlServer$")
	cmd.Env = append(os.Environ(), "IPC_FAKE_SOCKET="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close() // listening: the fake server answers and accepts on
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the fake server did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := Call(ctx, sock, Request{Command: "reload"})
	if err == nil || !strings.Contains(err.Error(), "not trusting it") {
		t.Fatalf("Call = %+v, %v; want it refused for the peer's uid", resp, err)
	}
}

// TestFakeControlServer is the other user's server of
// TestCallTrustsOnlyOurUID: it answers any request with a fake success.
func TestFakeControlServer(t *testing.T) {
	path := os.Getenv("IPC_FAKE_SOCKET")
	if path == "" {
		t.Skip("a helper of TestCallTrustsOnlyOurUID")
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		ReadFrame(c)
		WriteFrame(c, TypeResponse, Response{OK: true})
		c.Close()
	}
}

// copyExecutable copies the running test binary to path, executable by
// anyone.
func copyExecutable(t *testing.T, path string) {
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
