package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
)

// newLogger builds the process's logger from the global flags: structured,
// to stderr, console-encoded on a terminal and JSON otherwise.
func newLogger(c *cli.Context) (*zap.Logger, error) {
	var level zapcore.Level
	if err := level.Set(c.String("log-level")); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
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
		return nil, fmt.Errorf("--log-format %q: want console, json or auto", format)
	}
	cfg.Level = zap.NewAtomicLevelAt(level)
	cfg.DisableStacktrace = true // errors here are operational, not bugs
	cfg.DisableCaller = true
	cfg.Sampling = nil
	return cfg.Build()
}
