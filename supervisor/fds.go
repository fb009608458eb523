package supervisor

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// closeOnExecInherited marks every descriptor above stderr close-on-exec.
// Descriptors this process inherited without the flag would otherwise pass
// on to every worker; baton's own are opened close-on-exec already, and a
// worker receives exactly what it is given.
func closeOnExecInherited() error {
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return nil
	}
	// Kernels before 5.11: walk the descriptor table.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
	}
	return nil
}
