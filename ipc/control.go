package ipc

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Call sends one request to the control socket at path and returns the
// response. The context bounds the whole exchange: a reload answers only once
// its handoff is decided.
func Call(ctx context.Context, path string, req Request) (*Response, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w (is baton running?)", path, err)
	}
	defer c.Close()
	// Only baton's own uid (or root) may answer for it: a socket another
	// user swapped in could report a reload that never happened.
	if uid, err := PeerUID(c.(*net.UnixConn)); err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	} else if uid != os.Geteuid() && uid != 0 {
		return nil, fmt.Errorf("control socket %s is served by uid %d, not this user (%d) or root: not trusting it", path, uid, os.Geteuid())
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := WriteFrame(c, TypeRequest, req); err != nil {
		return nil, fmt.Errorf("control socket %s: send %s: %w", path, req.Command, err)
	}
	fr, err := ReadFrame(c)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("control socket %s: %s: %w", path, req.Command, ctx.Err())
		}
		return nil, fmt.Errorf("control socket %s: read answer to %s: %w", path, req.Command, err)
	}
	if fr.Type != TypeResponse {
		return nil, fmt.Errorf("%w: %s in answer to a request", ErrUnexpected, fr.Type)
	}
	var resp Response
	if err := fr.Unmarshal(&resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// PeerUID returns the uid of the process at the other end of c
// (SO_PEERCRED).
func PeerUID(c *net.UnixConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if cerr != nil {
		return -1, fmt.Errorf("peer credentials: %w", cerr)
	}
	return int(cred.Uid), nil
}
