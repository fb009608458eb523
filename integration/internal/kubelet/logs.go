package kubelet

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// serveLogs serves GET /containerLogs/{namespace}/{pod}/{container} on
// NodeIP:Port over TLS, as the kubelet does for the API server's
// pods/log: sinceTime, sinceSeconds, tailLines and timestamps are
// honoured; follow is not (what is logged so far is returned).
func (k *Kubelet) serveLogs() (*http.Server, error) {
	cert, err := selfSigned(k.NodeIP)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(k.NodeIP.String(), strconv.Itoa(Port)))
	if err != nil {
		return nil, fmt.Errorf("kubelet port: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", k.containerLogs)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	k.wg.Go(func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			k.Logf("kubelet: log server: %v", err)
		}
	})
	return srv, nil
}

func (k *Kubelet) containerLogs(w http.ResponseWriter, r *http.Request) {
	key := types.NamespacedName{Namespace: r.PathValue("namespace"), Name: r.PathValue("pod")}
	obj, ok, _ := k.pods.GetByKey(key.String())
	if !ok {
		http.Error(w, "pod not found", http.StatusNotFound)
		return
	}
	pod := obj.(*corev1.Pod)
	f, err := os.Open(k.podDir(pod.UID) + "/" + r.PathValue("container") + ".log")
	if err != nil {
		http.Error(w, "container not found", http.StatusNotFound)
		return
	}
	defer f.Close()
	q := r.URL.Query()
	var since time.Time
	if s := q.Get("sinceTime"); s != "" {
		if since, err = time.Parse(time.RFC3339, s); err != nil {
			http.Error(w, "sinceTime: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	if s := q.Get("sinceSeconds"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			http.Error(w, "sinceSeconds: "+err.Error(), http.StatusBadRequest)
			return
		}
		since = time.Now().Add(-time.Duration(n) * time.Second)
	}
	stamps := q.Get("timestamps") == "true"
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 2<<20)
	for sc.Scan() {
		stamp, line, _ := strings.Cut(sc.Text(), " ")
		if t, err := time.Parse(time.RFC3339Nano, stamp); err != nil || t.Before(since) {
			continue
		}
		if stamps {
			line = stamp + " " + line
		}
		lines = append(lines, line)
	}
	if s := q.Get("tailLines"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 && n < len(lines) {
			lines = lines[len(lines)-n:]
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

// selfSigned makes the kubelet port's certificate: the API server does not
// verify it unless told a CA (--kubelet-certificate-authority).
func selfSigned(ip netip.Addr) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "stand-in kubelet"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IP(ip.AsSlice())}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
