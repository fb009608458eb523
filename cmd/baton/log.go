package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/baton-proxy/baton/internal/logsink"
	"github.com/urfave/cli/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
)

// newLogger builds the process's logger from the global flags: structured,
// to stderr, console-encoded on a terminal and JSON otherwise, through a
// sink that never blocks (lines are dropped and counted when stderr does
// not keep up). Close the sink at exit.
func newLogger(c *cli.Context) (*zap.Logger, *logsink.Sink, error) {
	var level zapcore.Level
	if err := level.Set(c.String("log-level")); err != nil {
		return nil, nil, fmt.Errorf("--log-level: %w", err)
	}
	format := c.String("log-format")
	if format == "auto" {
		format = "json"
		if _, err := unix.IoctlGetTermios(int(os.Stderr.Fd()), unix.TCGETS); err == nil {
			format = "console"
		}
	}
	var cfg zap.Config
	switch format {
	case "json":
		cfg = zap.NewProductionConfig()
		cfg.EncoderConfig.TimeKey = "time"
		cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	case "console":
		cfg = zap.NewDevelopmentConfig()
		cfg.DisableStacktrace = true
		cfg.EncoderConfig.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
	default:
		return nil, nil, fmt.Errorf("--log-format %q: want console, json or auto", format)
	}
	// A closed stderr must not kill baton: writes to it return EPIPE,
	// which the sink counts, instead of raising SIGPIPE.
	signal.Ignore(syscall.SIGPIPE)
	sink := logsink.New(os.Stderr, logsink.DefaultLines)
	var enc zapcore.Encoder
	if format == "json" {
		enc = zapcore.NewJSONEncoder(cfg.EncoderConfig)
	} else {
		enc = zapcore.NewConsoleEncoder(cfg.EncoderConfig)
	}
	core := zapcore.NewCore(enc, sink, zap.NewAtomicLevelAt(level))
	// No stack traces (errors here are operational, not bugs), no caller.
	return zap.New(core, zap.ErrorOutput(zapcore.Lock(zapcore.AddSync(sink)))), sink, nil
}
