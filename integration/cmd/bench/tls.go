package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/baton-proxy/baton/integration/internal/load"
)

// makeCerts writes a server certificate for bench.example, self-signed,
// with an ECDSA P-256 key and with an RSA 2048 one: every target serves
// the same files.
func makeCerts(dir string) (map[string]tlsFiles, error) {
	out := map[string]tlsFiles{}
	for _, kind := range []string{"ecdsa", "rsa"} {
		var key crypto.Signer
		var err error
		if kind == "rsa" {
			key, err = rsa.GenerateKey(rand.Reader, 2048)
		} else {
			key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		}
		if err != nil {
			return nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(time.Now().UnixNano()),
			Subject:      pkix.Name{CommonName: "bench.example"},
			DNSNames:     []string{"bench.example"},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
		if err != nil {
			return nil, err
		}
		kder, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, err
		}
		certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
		f := tlsFiles{cert: filepath.Join(dir, kind+".crt"), key: filepath.Join(dir, kind+".key"), combined: filepath.Join(dir, kind+".pem")}
		for path, b := range map[string][]byte{f.cert: certPEM, f.key: keyPEM, f.combined: append(append([]byte{}, certPEM...), keyPEM...)} {
			if err := os.WriteFile(path, b, 0o600); err != nil {
				return nil, err
			}
		}
		out[kind] = f
	}
	return out, nil
}

// tlsResult is one target's TLS figures: new connections per second with
// full handshakes (ECDSA, RSA) and resumed ones, HTTP/1.1 keep-alive over
// TLS, and HTTP/2 over TLS.
type tlsResult struct {
	FullECDSA *load.Result `json:"fullEcdsa"`
	FullRSA   *load.Result `json:"fullRsa"`
	Resumed   *load.Result `json:"resumed"`
	KeepAlive *load.Result `json:"keepAlive"`
	H2        *load.Result `json:"h2"`
}

// best keeps the result with more requests per second.
func best(old, cur *load.Result) *load.Result {
	if old == nil || (cur != nil && cur.RPS() > old.RPS()) {
		return cur
	}
	return old
}

// measureTLS runs one round of the ECDSA rows for target name.
func (b *bench) measureTLS(name string, round int) {
	if name == "direct" {
		return
	}
	b.run(name, fmt.Sprintf("TLS, round %d", round+1), func(t target) error {
		c, d := strconv.Itoa(b.s.Concurrency), b.s.ThroughputRun.String()
		tr := b.res.TLS[name]
		defer func() { b.res.TLS[name] = tr }()
		b.loadgen("-http", t.HTTPSAddr(), "-tls", "-keepalive", c, "-duration", "1s") // warm-up
		for _, row := range []struct {
			dst  **load.Result
			args []string
		}{
			{&tr.FullECDSA, []string{"-newconn", c}},
			{&tr.Resumed, []string{"-newconn", c, "-tls-resume"}},
			{&tr.KeepAlive, []string{"-keepalive", c}},
			{&tr.H2, []string{"-h2", c}},
		} {
			res, err := b.loadgen(append([]string{"-http", t.HTTPSAddr(), "-tls", "-duration", d}, row.args...)...)
			if err != nil {
				return err
			}
			*row.dst = best(*row.dst, res)
		}
		return nil
	})
}

// measureTLSFull runs one round of full handshakes with the RSA
// certificate (b.key is rsa).
func (b *bench) measureTLSFull(name string, round int) {
	if name == "direct" {
		return
	}
	b.run(name, fmt.Sprintf("TLS RSA, round %d", round+1), func(t target) error {
		res, err := b.loadgen("-http", t.HTTPSAddr(), "-tls", "-newconn", strconv.Itoa(b.s.Concurrency), "-duration", b.s.ThroughputRun.String())
		tr := b.res.TLS[name]
		tr.FullRSA = best(tr.FullRSA, res)
		b.res.TLS[name] = tr
		return err
	})
}

// accessLogResult is baton's keep-alive rate with the access log off and
// on (JSON to a file), each its best round, and the workers' CPU time per
// request, each its lowest: steadier than req/s on a shared machine, whose
// noise is larger than the log's cost.
type accessLogResult struct {
	Off *load.Result `json:"off"`
	On  *load.Result `json:"on"`
	// OffCPU and OnCPU are microseconds of worker CPU (user and system)
	// per request.
	OffCPU float64 `json:"offCpuMicros,omitempty"`
	OnCPU  float64 `json:"onCpuMicros,omitempty"`
}

// measureAccessLog runs one round of keep-alive load on baton with the
// access log on and off, one after the other.
func (b *bench) measureAccessLog(round int) {
	if b.res.AccessLog == nil {
		b.res.AccessLog = &accessLogResult{}
	}
	for _, name := range []string{"baton", "baton-accesslog"} {
		b.run(name, fmt.Sprintf("access log cost, round %d", round+1), func(t target) error {
			c := strconv.Itoa(b.s.Concurrency)
			b.loadgen("-http", t.HTTPAddr(), "-keepalive", c, "-duration", "1s")
			workers := t.PIDs()["worker"]
			cpu0 := cpuTicks(workers)
			res, err := b.loadgen("-http", t.HTTPAddr(), "-keepalive", c, "-duration", b.s.ThroughputRun.String())
			var perReq float64
			if res != nil && res.Requests > 0 {
				perReq = float64(cpuTicks(workers)-cpu0) * 1e6 / clockTicks / float64(res.Requests)
			}
			lowest := func(prev float64) float64 {
				if prev == 0 || (perReq > 0 && perReq < prev) {
					return perReq
				}
				return prev
			}
			if name == "baton" {
				b.res.AccessLog.Off = best(b.res.AccessLog.Off, res)
				b.res.AccessLog.OffCPU = lowest(b.res.AccessLog.OffCPU)
			} else {
				b.res.AccessLog.On = best(b.res.AccessLog.On, res)
				b.res.AccessLog.OnCPU = lowest(b.res.AccessLog.OnCPU)
			}
			return err
		})
	}
}

// tlsHandoffs runs HTTPS load, keep-alive and new connections that resume
// their sessions, while reloading the target every ReloadEvery: failures,
// and how many new connections resumed across the reloads.
func (b *bench) tlsHandoffs(t target) (handoffRun, error) {
	return b.reloadUnderLoad(t, b.s.TLSHandoffRun, "-http", t.HTTPSAddr(), "-tls", "-tls-resume",
		"-keepalive", "4", "-newconn", "4", "-retry")
}
