package proxy

import (
	"context"
	"errors"
	"fmt"
	stdlog "log"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/ipc"
	"github.com/baton-proxy/baton/proxy/kube"
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
//
// logDropped, when set, reports the log lines the worker's log
// destination dropped; they go with its stats.
func RunWorker(ctx context.Context, w *ipc.Worker, log *zap.Logger, logDropped func() uint64) error {
	cfg, err := config.Unmarshal(w.Hello().Config)
	if err != nil {
		err = fmt.Errorf("config from supervisor: %w", err)
		w.Fail(err.Error())
		return err
	}
	// What libraries write to the standard logger (x/net/http2's
	// client, of a backend's protocol errors) goes to the worker's log at
	// debug level: a backend that misbehaves cannot flood it.
	stdlog.SetFlags(0)
	stdlog.SetOutput(debugWriter{log.Named("http2")})
	p := New(cfg, log)
	p.logDropped = logDropped
	p.Generation = w.Hello().Generation
	if al := cfg.AccessLog; al.Path != "" {
		out := w.AccessLogFile()
		if al.Path == config.AccessLogStderr || out == nil {
			out = os.Stderr
		}
		p.access = newAccessLog(al.Format, out)
		defer p.access.close()
		w.OnLogFile(p.access.setFile)
	}
	p.TicketKeys = w.TicketKeys()
	w.OnTicketKeys(p.setTicketKeys)
	if targets := p.KubeTargets(); len(targets) > 0 {
		// Ready means routes installed: wait for the caches to sync and
		// the first endpoints to be in place before serving.
		stop, err := startKube(ctx, w, p, cfg, targets, log)
		if err != nil {
			w.Fail(err.Error())
			return err
		}
		defer stop()
	}
	// Pausing some sockets is how a canary takes its share where BPF
	// cannot steer: the set is applied before any socket is accepted on,
	// and then as it changes.
	w.OnPaused(p.SetPaused)
	// A route provider's routing (the Gateway API's) is applied as it
	// comes, the last one first when they come faster than they apply
	// (one may wait for Kubernetes caches: not in the receiving
	// goroutine, which must go on to hear a drain); the first, when the
	// hello announces one, before ready: a worker that served without its
	// routes would answer them 404.
	defer p.StopKube()
	type routing struct {
		payload []byte
		version uint64
	}
	routings := make(chan routing, 1)
	w.OnRouting(func(payload []byte, version uint64) {
		select {
		case <-routings: // replaced by the newer one
		default:
		}
		routings <- routing{payload, version}
	})
	routed := make(chan struct{})
	actx, stopApplying := context.WithCancel(context.Background())
	var applier sync.WaitGroup
	applier.Go(func() {
		var first sync.Once
		for {
			select {
			case r := <-routings:
				start := time.Now()
				if err := p.applyRouting(actx, r.payload, r.version); err != nil {
					log.Warn("routing applied in part", zap.Uint64("version", r.version), zap.Error(err))
				}
				log.Debug("routing applied", zap.Uint64("version", r.version), zap.Int("bytes", len(r.payload)), zap.Duration("took", time.Since(start)))
				first.Do(func() { close(routed) })
			case <-actx.Done():
				return
			}
		}
	})
	defer func() {
		stopApplying()
		applier.Wait()
	}()
	if w.Hello().Routing {
		select {
		case <-routed:
		case <-w.Draining():
			err := errors.New("told to drain before the routing came")
			w.Fail(err.Error())
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := p.Serve(w.Listeners()); err != nil {
		w.Fail(err.Error())
		return err
	}
	w.AckDrains()
	// The first stats go before ready: they say which routing the worker
	// applied, and a ready worker that has not said it counts as behind
	// in the supervisor's status.
	w.SendStats(p.Stats())
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
			case <-p.changed: // endpoints or the routing changed: status shows it now
			case <-stop:
				return
			}
			w.SendStats(p.Stats())
		}
	}()

	var (
		deadline time.Time
		closing  bool
	)
	select {
	case <-w.Draining():
		d := w.DrainInfo()
		deadline, closing = d.Deadline, d.Closing
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
	p.StopAccepting(closing)
	if err := w.StoppedAccepting(); err != nil {
		log.Warn("telling the supervisor this worker stopped accepting", zap.Error(err))
	}
	p.Drain(dctx, closing)
	close(stop)
	<-reported
	w.SendStats(p.Stats())
	log.Info("drained", zap.Int64("connections", p.stats.conns.Load()))
	return nil
}

// waitingInterval is how often a worker waiting for its Kubernetes caches
// looks at what they wait for.
const waitingInterval = 500 * time.Millisecond

// startKube starts watching the Kubernetes Services of targets and waits
// for the first endpoints; the proxy owns the watch after. The returned
// function stops it.
func startKube(ctx context.Context, w *ipc.Worker, p *Proxy, cfg *config.Config, targets []kube.Target, log *zap.Logger) (func(), error) {
	kube.RouteKlog(log)
	client, err := kube.NewClient(cfg.Kubernetes.Kubeconfig, "baton")
	if err != nil {
		return nil, err
	}
	kctx, cancel := context.WithCancel(context.Background())
	watcher := kube.New(client, targets, p.ApplyKube, log)
	synced := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		watcher.Run(kctx, synced)
	}()
	stop := func() {
		cancel()
		<-done
	}
	start := time.Now()
	// Until the caches sync, say what they wait for (the API server's
	// error): the supervisor gives it as the reason of a readyTimeout.
	tick := time.NewTicker(waitingInterval)
	defer tick.Stop()
	said := ""
wait:
	for {
		select {
		case err = <-synced:
			break wait
		case <-w.Draining():
			err = errors.New("told to drain before the Kubernetes caches synced")
			break wait
		case <-ctx.Done():
			err = ctx.Err()
			break wait
		case <-tick.C:
			if why := watcher.Waiting(); why != "" && why != said {
				said = why
				w.Waiting(why)
			}
		}
	}
	if err == nil {
		err = p.configErrors()
	}
	if err != nil {
		stop()
		return nil, err
	}
	log.Info("kubernetes caches synced", zap.Int("services", len(targets)), zap.Duration("after", time.Since(start)))
	// The proxy owns the watch from here: a routing changes its targets.
	p.adoptKube(watcher, cancel, done)
	return p.StopKube, nil
}

// debugWriter writes each line it is given as a debug log entry.
type debugWriter struct{ log *zap.Logger }

func (w debugWriter) Write(p []byte) (int, error) {
	if ce := w.log.Check(zap.DebugLevel, strings.TrimRight(string(p), "\n")); ce != nil {
		ce.Write()
	}
	return len(p), nil
}
