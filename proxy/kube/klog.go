package kube

import (
	"github.com/go-logr/logr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
)

// RouteKlog sends client-go's logs (klog's) to log, named client-go: a
// list or watch that fails says why in baton's log, in its format, with
// the worker's fields. klog's verbosity 0 is logged at info (errors at
// error); the chattier levels only when log is at debug. klog is
// process-wide: the last call wins.
func RouteKlog(log *zap.Logger) {
	klog.SetLogger(logr.New(&zapSink{log: log.Named("client-go").WithOptions(zap.AddCallerSkip(1))}))
}

// zapSink is a logr.LogSink over zap.
type zapSink struct {
	log *zap.Logger
}

var _ logr.LogSink = (*zapSink)(nil)

func (s *zapSink) Init(logr.RuntimeInfo) {}

// Enabled takes klog's V(0), and up to V(4) when debug is on.
func (s *zapSink) Enabled(level int) bool {
	if level == 0 {
		return true
	}
	return level <= 4 && s.log.Core().Enabled(zapcore.DebugLevel)
}

func (s *zapSink) Info(level int, msg string, kv ...any) {
	if level == 0 {
		s.log.Info(msg, fields(kv)...)
	} else {
		s.log.Debug(msg, append(fields(kv), zap.Int("v", level))...)
	}
}

func (s *zapSink) Error(err error, msg string, kv ...any) {
	s.log.Error(msg, append(fields(kv), zap.Error(err))...)
}

func (s *zapSink) WithValues(kv ...any) logr.LogSink {
	return &zapSink{log: s.log.With(fields(kv)...)}
}

func (s *zapSink) WithName(name string) logr.LogSink {
	return &zapSink{log: s.log.Named(name)}
}

// fields turns logr's alternating keys and values into zap fields; a key
// that is not a string, or one left without a value, is kept as such.
func fields(kv []any) []zap.Field {
	fs := make([]zap.Field, 0, (len(kv)+1)/2)
	for i := 0; i < len(kv); i += 2 {
		key, ok := kv[i].(string)
		if !ok {
			key = "key"
		}
		if i+1 == len(kv) {
			fs = append(fs, zap.Any("missing", kv[i]))
			break
		}
		fs = append(fs, zap.Any(key, kv[i+1]))
	}
	return fs
}
