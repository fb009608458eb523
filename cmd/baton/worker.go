package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"syscall"

	"github.com/baton-proxy/baton/ipc"
	"github.com/baton-proxy/baton/proxy"
	"github.com/urfave/cli/v2"
	"go.uber.org/zap"
)

func workerCommand() *cli.Command {
	return &cli.Command{
		Name:   "worker",
		Usage:  "run as a worker of a baton supervisor (started by 'baton run')",
		Hidden: true,
		Action: func(c *cli.Context) error {
			base, sink, err := newLogger(c)
			if err != nil {
				return err
			}
			defer sink.Close()
			// The supervisor decides when workers stop: a terminal's ^C or
			// a HUP meant for it must not reach them. SIGTERM drains.
			signal.Ignore(syscall.SIGHUP, syscall.SIGINT)
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
			defer stop()

			w, err := ipc.Connect()
			if err != nil {
				return err
			}
			defer w.Close()
			h := w.Hello()
			log := base.Named("worker").With(zap.Uint64("generation", h.Generation), zap.Int("slot", h.Slot), zap.Int("pid", os.Getpid()))
			// Like nginx's one worker per core: workers share the CPUs
			// instead of each scheduling over all of them.
			if os.Getenv("GOMAXPROCS") == "" && h.Workers > 1 {
				runtime.GOMAXPROCS(max(1, runtime.GOMAXPROCS(0)/h.Workers))
			}
			if dir := os.Getenv("BATON_WORKER_CPUPROFILE"); dir != "" {
				stop, err := startCPUProfile(dir)
				if err != nil {
					log.Warn("cpu profile", zap.Error(err))
				} else {
					defer stop()
				}
			}
			if dir := os.Getenv("BATON_WORKER_TRACE"); dir != "" {
				stop, err := startTrace(dir)
				if err != nil {
					log.Warn("execution trace", zap.Error(err))
				} else {
					defer stop()
				}
			}
			if err := proxy.RunWorker(ctx, w, log, sink.Dropped); err != nil {
				log.Error("worker failed", zap.Error(err))
				return err
			}
			return nil
		},
	}
}

// startCPUProfile writes this worker's CPU profile to dir/worker-PID.prof
// until the returned function is called: $BATON_WORKER_CPUPROFILE=dir on
// `baton run` profiles every worker, for the engineer chasing a cost.
func startCPUProfile(dir string) (func(), error) {
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("worker-%d.prof", os.Getpid())))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// startTrace writes this worker's execution trace (runtime/trace: which
// goroutine ran on which thread and processor, and why each waited) to
// dir/worker-PID.trace until the returned function is called:
// $BATON_WORKER_TRACE=dir on `baton run`. Read it with `go tool trace`.
// A trace grows by megabytes a second under load: for short runs.
func startTrace(dir string) (func(), error) {
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("worker-%d.trace", os.Getpid())))
	if err != nil {
		return nil, err
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		trace.Stop()
		f.Close()
	}, nil
}
