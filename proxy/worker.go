package proxy

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/ipc"
	"go.uber.org/zap"
)

// Worker timing.
const (
	// StatsInterval is how often a worker reports its counters.
	StatsInterval = time.Second
	// exitMargin is how long before the supervisor's kill deadline the
	// worker closes what is left itself, to exit cleanly.
	exitMargin = 100 * time.Millisecond
)

// RunWorker runs the proxy as a baton worker on the connection w: it reads
// the config from the hello, serves, says ready, and drains when the
// supervisor says so (or is gone, or ctx ends). A worker that cannot serve
// tells the supervisor why and returns the error.
func RunWorker(ctx context.Context, w *ipc.Worker, log *zap.Logger) error {
	cfg, err := config.Unmarshal(w.Hello().Config)
	if err != nil {
		err = fmt.Errorf("config from supervisor: %w", err)
		w.Fail(err.Error())
		return err
	}
	p := New(cfg, log)
	if err := p.Serve(w.Listeners()); err != nil {
		w.Fail(err.Error())
		return err
	}
	if err := w.Ready(); err != nil {
		return fmt.Errorf("say ready: %w", err)
	}
	log.Info("worker ready")

	stop := make(chan struct{})
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		t := time.NewTicker(StatsInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				w.SendStats(p.Stats())
			case <-stop:
				return
			}
		}
	}()

	var deadline time.Time
	select {
	case <-w.Draining():
		d := w.DrainInfo()
		deadline = d.Deadline
		if deadline.IsZero() {
			deadline = time.Now().Add(cfg.DrainTimeout.Std())
		}
		log.Info("draining", zap.String("reason", d.Reason), zap.Time("deadline", deadline))
	case <-ctx.Done():
		deadline = time.Now().Add(cfg.DrainTimeout.Std())
		log.Info("draining on signal", zap.Time("deadline", deadline))
	}
	if until := time.Until(deadline); until > 2*exitMargin {
		deadline = deadline.Add(-exitMargin)
	}
	dctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	p.Drain(dctx)
	close(stop)
	<-reported
	w.SendStats(p.Stats())
	log.Info("drained", zap.Int64("connections", p.stats.conns.Load()))
	return nil
}
