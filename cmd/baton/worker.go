package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
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
			// A TLS handshake allocates tens of kilobytes, and a worker's
			// live heap is a few megabytes: at Go's default the collector
			// ran after every few hundred handshakes. Twice the headroom:
			// about 3% more resumed handshakes a second for about 4 MiB
			// more per worker under that load (docs/operations.md).
			if os.Getenv("GOGC") == "" {
				debug.SetGCPercent(workerGOGC)
			}
			for _, r := range workerRecordings {
				if dir := os.Getenv(r.env); dir != "" {
					stop, err := startRecording(dir, r.ext, r.start, r.stop)
					if err != nil {
						log.Warn(r.what, zap.Error(err))
						continue
					}
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

// workerGOGC is a worker's GOGC unless baton's environment sets one.
const workerGOGC = 200

// workerRecordings are what a worker records, each to dir/worker-PID.ext
// while it runs, when `baton run` is given $VAR=dir: for the engineer
// chasing a cost.
var workerRecordings = []struct {
	env, ext, what string
	start          func(io.Writer) error
	stop           func()
}{
	// The CPU profile: read it with `go tool pprof`.
	{"BATON_WORKER_CPUPROFILE", "prof", "cpu profile", pprof.StartCPUProfile, pprof.StopCPUProfile},
	// The execution trace (runtime/trace: which goroutine ran on which
	// thread and processor, and why each waited): read it with `go tool
	// trace`. It grows by megabytes a second under load: for short runs.
	{"BATON_WORKER_TRACE", "trace", "execution trace", trace.Start, trace.Stop},
	// The heap profile, written as the worker stops (after a GC): what
	// it held at the end, and what it allocated on the way. `go tool
	// pprof -sample_index=inuse_space`.
	{"BATON_WORKER_HEAPPROFILE", "heap", "heap profile", heapProfile.start, heapProfile.stop},
}

// heapProfile writes the heap profile at the worker's stop.
var heapProfile heapRecording

type heapRecording struct{ w io.Writer }

func (h *heapRecording) start(w io.Writer) error { h.w = w; return nil }

func (h *heapRecording) stop() {
	runtime.GC()
	pprof.WriteHeapProfile(h.w)
}

// startRecording starts writing to dir/worker-PID.ext with start; the
// function returned stops it and closes the file.
func startRecording(dir, ext string, start func(io.Writer) error, stop func()) (func(), error) {
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("worker-%d.%s", os.Getpid(), ext)))
	if err != nil {
		return nil, err
	}
	if err := start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		stop()
		f.Close()
	}, nil
}
