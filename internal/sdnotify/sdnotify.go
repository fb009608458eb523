// Package sdnotify speaks systemd's service notification protocol
// (sd_notify(3)): newline-separated KEY=VALUE assignments, one datagram per
// notification, to the unix datagram socket named by $NOTIFY_SOCKET.
package sdnotify

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Notification keys baton sends.
const (
	Ready     = "READY=1"
	Reloading = "RELOADING=1"
	Stopping  = "STOPPING=1"
	Watchdog  = "WATCHDOG=1"
)

// Notifier sends notifications to one socket. A nil Notifier sends
// nothing, so callers need not check whether systemd listens.
type Notifier struct {
	addr *net.UnixAddr
}

// FromEnv returns a Notifier for $NOTIFY_SOCKET, or nil when it is unset.
// A name that starts with '@' is in the abstract namespace.
func FromEnv() *Notifier {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if path[0] == '@' {
		path = "\x00" + path[1:]
	}
	return &Notifier{addr: &net.UnixAddr{Name: path, Net: "unixgram"}}
}

// Notify sends the assignments in one datagram.
func (n *Notifier) Notify(assignments ...string) error {
	if n == nil {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(strings.Join(assignments, "\n") + "\n")); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	return nil
}

// Monotonic is MONOTONIC_USEC=<now on CLOCK_MONOTONIC>, which systemd
// requires beside RELOADING=1 (Type=notify-reload).
func Monotonic() string {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return "MONOTONIC_USEC=" + strconv.FormatInt(ts.Nano()/1000, 10)
}

// MainPID is MAINPID=<pid>: the process systemd should track from now on.
func MainPID(pid int) string { return "MAINPID=" + strconv.Itoa(pid) }

// Status is STATUS=<text>, shown by systemctl status.
func Status(text string) string {
	return "STATUS=" + strings.ReplaceAll(text, "\n", " ")
}

// WatchdogInterval returns how often to send WATCHDOG=1 to this process's
// watchdog ($WATCHDOG_USEC halved, for margin), or 0 when there is none or
// it is meant for another process ($WATCHDOG_PID).
func WatchdogInterval() time.Duration {
	usec, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64)
	if err != nil || usec <= 0 {
		return 0
	}
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0
	}
	return time.Duration(usec) * time.Microsecond / 2
}
