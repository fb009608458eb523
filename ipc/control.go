package ipc

import (
	"context"
	"fmt"
	"net"
	"time"
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
