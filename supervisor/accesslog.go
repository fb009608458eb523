package supervisor

import (
	"fmt"
	"os"

	"github.com/baton-proxy/baton/ipc"
	"go.uber.org/zap"
)

// The access log is the workers' (they know what a request is), but its
// file is the supervisor's: it opens it, so that workers running as
// another user can write where they could not open, and reopens it on
// SIGUSR1 after a rotation, handing the new file to every worker.

// useAccessLog opens cfg's access log file when it is not the one open.
func (s *Supervisor) useAccessLog(cfg *Config) error {
	st := &s.state
	path := cfg.AccessLogPath
	if path == st.accessLogPath {
		return nil
	}
	var f *os.File
	if path != "" {
		var err error
		if f, err = openAccessLog(path); err != nil {
			return err
		}
	}
	if st.accessLog != nil {
		st.accessLog.Close() // workers hold their own copies
	}
	st.accessLog, st.accessLogPath = f, path
	return nil
}

func openAccessLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("access log: %w", err)
	}
	return f, nil
}

// reopenLogs reopens the access log file (logrotate moved it) and gives
// the new one to every worker that writes there.
func (s *Supervisor) reopenLogs() {
	st := &s.state
	if st.accessLog == nil {
		return
	}
	f, err := openAccessLog(st.accessLogPath)
	if err != nil {
		s.log.Error("reopen the access log", zap.Error(err))
		return
	}
	st.accessLog.Close()
	st.accessLog = f
	for _, g := range st.gens {
		if g.cfg.AccessLogPath != st.accessLogPath {
			continue
		}
		for _, sl := range g.slots {
			if sl.proc == nil {
				continue
			}
			if err := sl.proc.conn.Send(ipc.TypeLogFile, ipc.LogFile{}, f); err != nil {
				sl.log().Warn("handing over the reopened access log failed", zap.Error(err))
			}
		}
	}
	s.log.Info("access log reopened", zap.String("path", st.accessLogPath))
}

// ReopenLogs asks for the access log to be reopened (SIGUSR1).
func (s *Supervisor) ReopenLogs() { s.send(reopenLogsEvent{}) }
