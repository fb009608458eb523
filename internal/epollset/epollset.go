// Package epollset reads which descriptors a process's epoll instances
// watch, from /proc/PID/fdinfo: how the tests show that a socket is held
// outside the Go runtime's poller (docs/design.md, "The supervisor does
// not watch its listening sockets").
package epollset

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrNone reports a process with no epoll instance.
var ErrNone = errors.New("epollset: no epoll instance")

// Watched returns the descriptors (of process pid) that any of pid's
// epoll instances watches.
func Watched(pid int) (map[int]bool, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("epollset: %w", err)
	}
	watched := map[int]bool{}
	polls := 0
	for _, e := range ents {
		if target, _ := os.Readlink(filepath.Join(dir, e.Name())); target != "anon_inode:[eventpoll]" {
			continue
		}
		polls++
		info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		for line := range strings.Lines(string(info)) {
			var tfd int
			if _, err := fmt.Sscanf(line, "tfd: %d", &tfd); err == nil {
				watched[tfd] = true
			}
		}
	}
	if polls == 0 {
		return nil, fmt.Errorf("%w in process %d", ErrNone, pid)
	}
	return watched, nil
}
