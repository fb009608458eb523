package supervisor

import (
	"time"

	"github.com/baton-proxy/baton/internal/watch"
	"go.uber.org/zap"
)

// WatchDebounce is how long the files of a config with watch: true must
// stay unchanged after a change before the reload starts: a certificate
// and its key written one after the other make one reload.
const WatchDebounce = time.Second

// fileWatch is the loop's watch on the config's files.
type fileWatch struct {
	w    *watch.Watcher
	stop chan struct{} // closed before w closes: a pending reload gives up
}

// updateWatch watches cfg's WatchFiles, or stops watching when it has
// none. It runs in the loop, for every config that loads: a config that
// fails later (a generation that does not start) is still the one whose
// files to watch, so that its fix is seen.
func (s *Supervisor) updateWatch(cfg *Config) {
	st := &s.state
	if len(cfg.WatchFiles) == 0 || st.stopping {
		s.stopWatch()
		return
	}
	if st.watch == nil {
		fw := &fileWatch{stop: make(chan struct{})}
		w, err := watch.New(WatchDebounce, func(changed []string) {
			s.log.Info("watched files changed: reloading", zap.Strings("files", changed))
			select {
			case s.events <- reloadEvent{trigger: "watch"}:
			case <-fw.stop:
			case <-s.done:
			}
		})
		if err != nil {
			s.log.Warn("cannot watch the config's files: reload with SIGHUP or baton reload", zap.Error(err))
			return
		}
		fw.w = w
		st.watch = fw
		s.log.Info("watching the config's files", zap.Strings("files", cfg.WatchFiles))
	}
	if err := st.watch.w.Set(cfg.WatchFiles); err != nil {
		s.log.Warn("watch: some files cannot be watched (their directory is missing?); a change there needs a reload by hand", zap.Error(err))
	}
}

// stopWatch ends the watch, if any.
func (s *Supervisor) stopWatch() {
	st := &s.state
	if st.watch == nil {
		return
	}
	close(st.watch.stop)
	st.watch.w.Close()
	st.watch = nil
}
