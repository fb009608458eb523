// Package sockfd reaches the descriptor of a socket shared with other
// processes without changing it for them.
//
// os.File.Fd and net.FileListener's File switch a descriptor to blocking
// mode, and O_NONBLOCK lives in the open file that every process holding
// the socket shares: one call would make every worker's accept loop block
// in accept(2). Everything here goes through syscall.RawConn.Control,
// which leaves the mode alone.
package sockfd

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Control runs fn on c's descriptor, which stays valid during fn only.
func Control(c syscall.Conn, fn func(fd int) error) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// Dup returns a close-on-exec duplicate of c's descriptor, named name.
func Dup(c syscall.Conn, name string) (*os.File, error) {
	var nfd int
	err := Control(c, func(fd int) (err error) {
		nfd, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dup %s: %w", name, err)
	}
	return os.NewFile(uintptr(nfd), name), nil
}
