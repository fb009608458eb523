package ipc

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// MaxRouting bounds a routing payload.
const MaxRouting = 64 << 20

// RoutingFile returns a file that holds payload, to send with a Routing
// message: a memfd sealed against every change, so that the one file can
// go to every worker and none can alter what the others read. A payload
// travels in a file because a packet of the socket is bounded by its
// buffer (MaxFrame), and a routing of thousands of routes is not.
func RoutingFile(payload []byte) (*os.File, error) {
	if len(payload) > MaxRouting {
		return nil, fmt.Errorf("%w: routing of %d bytes (limit %d)", ErrTooLarge, len(payload), MaxRouting)
	}
	fd, err := unix.MemfdCreate("baton-routing", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("ipc: routing file: %w", err)
	}
	f := os.NewFile(uintptr(fd), "routing")
	if _, err := f.Write(payload); err != nil {
		f.Close()
		return nil, fmt.Errorf("ipc: routing file: %w", err)
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, fmt.Errorf("ipc: routing file: seal: %w", err)
	}
	return f, nil
}

// readRouting reads the payload of a Routing message's file (from its
// start, whatever the file's offset: the workers share it).
func readRouting(f *os.File, r Routing) ([]byte, error) {
	if r.Size < 0 || r.Size > MaxRouting {
		return nil, fmt.Errorf("%w: routing of %d bytes (limit %d)", ErrTooLarge, r.Size, MaxRouting)
	}
	seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_WRITE == 0 {
		return nil, fmt.Errorf("%w: routing file not sealed against writes", ErrUnexpected)
	}
	b := make([]byte, r.Size)
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, fmt.Errorf("ipc: routing file: %w", err)
	}
	return b, nil
}
