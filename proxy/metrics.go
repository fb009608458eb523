package proxy

import (
	"sync/atomic"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/internal/metrics"
)

// Metric names; docs/operations.md lists them with their labels.
const (
	metricRequestDuration  = "baton_http_request_duration_seconds"
	metricConnectDuration  = "baton_upstream_connect_duration_seconds"
	metricResponseDuration = "baton_upstream_response_duration_seconds"
	metricTLSHandshakes    = "baton_tls_handshakes_total"
	metricTLSErrors        = "baton_tls_handshake_errors_total"
	metricProxyProtoErrors = "baton_proxy_protocol_errors_total"
	metricConnsRefused     = "baton_connections_refused_total"
)

// classHistograms are the request durations of one listener and backend,
// by status class.
type classHistograms [len(metrics.Classes)]metrics.Histogram

// listenerMetrics are what a listener records.
type listenerMetrics struct {
	// requests by backend name ("" for requests no backend served: no
	// route, a refused request). Built before serving; read-only after.
	requests                 map[string]*classHistograms
	tlsHandshakes, tlsErrors atomic.Uint64
	proxyProtocolErrors      atomic.Uint64
	refused                  atomic.Uint64 // connections closed at accept: http.maxConnections
	tls                      bool
	failures                 *atomic.Uint64 // the worker's count of 5xx answers
}

// newListenerMetrics prepares the series of listener lc: one per backend
// its routes name.
func newListenerMetrics(cfg *config.Config, lc *config.Listener, failures *atomic.Uint64) *listenerMetrics {
	m := &listenerMetrics{requests: map[string]*classHistograms{"": new(classHistograms)}, tls: lc.TLS != nil, failures: failures}
	for _, r := range cfg.Routes {
		if r.Listener == lc.Name && m.requests[r.Backend] == nil {
			m.requests[r.Backend] = new(classHistograms)
		}
	}
	return m
}

// request records a request's duration under its backend and status.
func (m *listenerMetrics) request(backend string, status int, d time.Duration) {
	h := m.requests[backend]
	if h == nil {
		h = m.requests[""]
	}
	h[metrics.ClassIndex(status)].Observe(d)
	if status >= 500 {
		m.failures.Add(1)
	}
}

// handshake counts a TLS handshake, failed or not.
func (m *listenerMetrics) handshake(err error) {
	m.tlsHandshakes.Add(1)
	if err != nil {
		m.tlsErrors.Add(1)
	}
}

// series returns the worker's metric series: request durations that have
// a count, upstream times of backends that were reached, TLS and PROXY
// protocol counters of the listeners that have them.
func (p *Proxy) series() []metrics.Series {
	var out []metrics.Series
	for _, lc := range p.cfg.Listeners {
		m := p.listenerMetrics[lc.Name]
		if m == nil {
			continue
		}
		for backend, hs := range m.requests {
			for i := range hs {
				if hs[i].Count() > 0 {
					out = append(out, hs[i].Series(metricRequestDuration, "listener", lc.Name, "backend", backend, "code_class", metrics.Classes[i]))
				}
			}
		}
		if m.tls {
			out = append(out,
				metrics.Series{Name: metricTLSHandshakes, Labels: []string{"listener", lc.Name}, Value: m.tlsHandshakes.Load()},
				metrics.Series{Name: metricTLSErrors, Labels: []string{"listener", lc.Name}, Value: m.tlsErrors.Load()})
		}
		if lc.ProxyProtocol {
			out = append(out, metrics.Series{Name: metricProxyProtoErrors, Labels: []string{"listener", lc.Name}, Value: m.proxyProtocolErrors.Load()})
		}
		out = append(out, metrics.Series{Name: metricConnsRefused, Labels: []string{"listener", lc.Name}, Value: m.refused.Load()})
	}
	p.eachBackend(func(b *backend) {
		if b.connectTime.Count() > 0 {
			out = append(out, b.connectTime.Series(metricConnectDuration, "backend", b.name))
		}
		if b.responseTime.Count() > 0 {
			out = append(out, b.responseTime.Series(metricResponseDuration, "backend", b.name))
		}
	})
	return out
}
