package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/internal/sdnotify"
	"github.com/baton-proxy/baton/internal/steer"
	"github.com/baton-proxy/baton/internal/upgrade"
	"github.com/baton-proxy/baton/supervisor"
	"github.com/urfave/cli/v2"
	"go.uber.org/zap"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "run the supervisor and its workers",
		Description: `Opens the listeners, starts a generation of workers, and supervises them.
SIGHUP (or 'baton reload') starts a new generation from the config and the
binary on disk; the old one drains once the new one is ready. SIGUSR2 (or
'baton upgrade') replaces the supervisor itself: a new one from the binary
on disk inherits the sockets, and this one drains and exits once the new
one's workers are ready. SIGTERM or SIGINT stops gracefully; a second one
stops at once.`,
		Flags: []cli.Flag{
			configFlag(),
			&cli.StringFlag{Name: "pid-file", Usage: "write the serving supervisor's pid to `FILE` (it changes at an upgrade)"},
			&cli.DurationFlag{Name: "upgrade-timeout", Value: time.Minute, Usage: "how long a new supervisor may take to be ready at an upgrade"},
		},
		Action: func(c *cli.Context) error {
			path := c.String("config")
			if path == "" {
				return errors.New("run: --config FILE is required")
			}
			log, sink, err := newLogger(c)
			if err != nil {
				return err
			}
			defer sink.Close()
			return runSupervisor(c, path, log, sink.Dropped)
		},
	}
}

func runSupervisor(c *cli.Context, path string, log *zap.Logger, logDropped func() uint64) error {
	// The upgrader hands the sockets to the next supervisor at an upgrade,
	// and takes them over from the previous one when this is one.
	upg, err := upgrade.New(upgrade.Options{
		Timeout: c.Duration("upgrade-timeout"),
		PIDFile: c.String("pid-file"),
	})
	if err != nil {
		return fmt.Errorf("upgrader: %w", err)
	}
	notifier := sdnotify.FromEnv()
	watchdog := sdnotify.WatchdogInterval()
	// The next supervisor of an upgrade pings the watchdog as the main
	// process (after its MAINPID=), not as ours.
	os.Unsetenv("WATCHDOG_PID")
	providers := &providerSink{} // its supervisor is set once there is one
	sup, err := supervisor.New(supervisor.Options{
		Notify: func(assignments ...string) {
			if err := notifier.Notify(assignments...); err != nil {
				log.Warn("systemd notification", zap.Error(err))
			}
		},
		WatchdogInterval: watchdog,
		Load:             func() (*supervisor.Config, error) { return loadSupervisorConfig(path, providers.provided()) },
		Env:              []string{"BATON_LOG_FORMAT=" + c.String("log-format"), "BATON_LOG_LEVEL=" + c.String("log-level")},
		Logger:           log,
		LogDropped:       logDropped,
		Version:          version,
		Upgrader:         upg,
		Steer:            newSteer,
	})
	if err != nil {
		return err
	}
	stopMetrics, err := serveMetrics(path, sup)
	if err != nil {
		return err
	}
	defer stopMetrics()
	if cfg, err := config.Load(path); err == nil && (cfg.Gateway != nil || cfg.Ingress != nil) {
		// The route providers' controllers, beside the supervisor (one
		// per replica): they end with the supervisor.
		providers.sup = sup
		// They stop when run returns, after the supervisor has: each
		// deferred stop cancels them all and waits for its own.
		pctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		for _, p := range []struct {
			on    bool
			name  string
			start func(context.Context, *config.Config, *providerSink, *zap.Logger) (func(), error)
		}{{cfg.Gateway != nil, "gateway", startGateway}, {cfg.Ingress != nil, "ingress", startIngress}} {
			if !p.on {
				continue
			}
			wait, err := p.start(pctx, cfg, providers, log)
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			defer func() {
				cancel()
				wait()
			}()
		}
	}
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(signals)
	handled := make(chan struct{})
	go func() {
		defer close(handled)
		stops := 0
		for {
			select {
			case sig := <-signals:
				log.Info("signal", zap.String("signal", sig.String()))
				switch sig {
				case syscall.SIGHUP:
					sup.ReloadAsync("signal")
					continue
				case syscall.SIGUSR2:
					sup.UpgradeAsync()
					continue
				case syscall.SIGUSR1:
					sup.ReopenLogs()
					continue
				}
				stops++
				sup.Stop(stops > 1)
			case <-sup.Done():
				return
			}
		}
	}()
	err = sup.Run(context.Background())
	<-handled
	return err
}

// loadSupervisorConfig reads the config file and gives the supervisor its
// part; the whole config travels to the workers as the payload.
func loadSupervisorConfig(path string, provided []config.Listener) (*supervisor.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	// The route providers' listeners (the Gateways'), beside the file's.
	cfg.Listeners = append(cfg.Listeners, provided...)
	payload, err := cfg.Marshal()
	if err != nil {
		return nil, fmt.Errorf("encode config for workers: %w", err)
	}
	cred, err := workerCredential(cfg.User, cfg.Group)
	if err != nil {
		return nil, err
	}
	sc := &supervisor.Config{
		ControlSocket: cfg.ControlSocket,
		Workers:       cfg.Workers,
		ReadyTimeout:  cfg.ReadyTimeout.Std(),
		DrainTimeout:  cfg.DrainTimeout.Std(),
		StopTimeout:   cfg.StopTimeout.Std(),
		ShutdownDelay: cfg.ShutdownDelay.Std(),
		WorkerTimeout: cfg.WorkerTimeout.Std(),
		MaxDraining:   cfg.MaxDraining,
		OrphanTimeout: cfg.OrphanTimeout.Std(),

		WorkerCredential: cred,
		Warnings:         cfg.Warnings,
		AccessLogPath:    accessLogFile(cfg.AccessLog.Path),
		Canary: supervisor.CanaryPolicy{
			Duration:      cfg.Canary.Duration.Std(),
			MinRequests:   cfg.Canary.MinRequests,
			MaxErrorRatio: cfg.Canary.MaxErrorRatio,
		},
		Payload: payload,
	}
	if cfg.Watch {
		for _, f := range append([]string{path}, cfg.Files()...) {
			abs, err := filepath.Abs(f)
			if err != nil {
				return nil, fmt.Errorf("watch %s: %w", f, err)
			}
			sc.WatchFiles = append(sc.WatchFiles, abs)
		}
	}
	for _, l := range cfg.Listeners {
		network, address, err := l.Network()
		if err != nil {
			return nil, err // Load validated it
		}
		sc.Listeners = append(sc.Listeners, supervisor.ListenerSpec{
			Name:      l.Name,
			Network:   network,
			Address:   address,
			Protocol:  l.Protocol,
			ReusePort: l.ReusePort,
			Sockets:   l.Sockets,
			FreeBind:  l.FreeBind,
		})
	}
	return sc, nil
}

// serveMetrics starts the HTTP endpoint the config names (metrics.address),
// if any: /metrics, /readyz, /healthz, and the status page (/ and
// status.json). The returned function stops it.
func serveMetrics(path string, sup *supervisor.Supervisor) (func(), error) {
	cfg, err := config.Load(path)
	if err != nil || cfg.Metrics.Address == "" {
		return func() {}, nil // a bad config is Run's to report
	}
	ln, err := net.Listen("tcp", cfg.Metrics.Address)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metricsHandler(sup))
	mux.Handle("/readyz", readyzHandler(sup))
	mux.Handle("/healthz", healthzHandler(sup))
	if cfg.Metrics.StatusPage != config.StatusPageOff {
		mux.Handle("/", statusPage(sup, cfg.Metrics.StatusPage != config.StatusPageOn))
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	return func() {
		srv.Close()
		<-done
	}, nil
}

// accessLogFile is the access log path the supervisor opens: a file, not
// stderr (workers write there on their own).
func accessLogFile(path string) string {
	if path == config.AccessLogStderr {
		return ""
	}
	return path
}

// newSteer loads a BPF steering program for a reuseport group, unless
// BATON_STEERING=off: then groups keep the kernel's hash, canaries take
// whole sockets (slots) and resizing is refused, as where BPF cannot load.
func newSteer() (*steer.Group, error) {
	if os.Getenv("BATON_STEERING") == "off" {
		return nil, errors.New("turned off (BATON_STEERING=off)")
	}
	return steer.New()
}
