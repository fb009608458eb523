package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// tlsSecret is a kubernetes.io/tls Secret with a fresh self-signed
// certificate for name.
func tlsSecret(t *testing.T, ns, secret, name string) *corev1.Secret {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secret}, Type: corev1.SecretTypeTLS, Data: map[string][]byte{
		corev1.TLSCertKey:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
	}}
}

func https(name string, port int32, host string, refs ...gwv1.SecretObjectReference) gwv1.Listener {
	l := listener(name, port, host)
	l.Protocol = gwv1.HTTPSProtocolType
	l.TLS = &gwv1.ListenerTLSConfig{CertificateRefs: refs}
	return l
}

func secretRef(ns, name string) gwv1.SecretObjectReference {
	r := gwv1.SecretObjectReference{Name: gwv1.ObjectName(name)}
	if ns != "" {
		r.Namespace = ptr(gwv1.Namespace(ns))
	}
	return r
}

// HTTPS listeners (Listener.TLS, GatewayConditionReason): certificates
// from Secrets of the Gateway's namespace or of one whose ReferenceGrant
// allows it; every listener of a port on one socket, its certificates
// together (SNI picks); a listener whose Secret is missing, invalid or not
// granted is not served, with ResolvedRefs false and the reason; a Secret
// that turns invalid serves its last good content on; a port's listeners
// share not a hostname (Conflicted); TestStreamListeners has the protocol
// conflicts.
func TestHTTPSListeners(t *testing.T) {
	a, b := tlsSecret(t, "infra", "a", "a.example"), tlsSecret(t, "certs", "b", "b.example")
	bad := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "bad"}, Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": []byte("no"), "tls.key": []byte("no")}}
	gw := gateway("infra", "gw", "baton", 0,
		https("a", 443, "a.example", secretRef("", "a")),
		https("b", 443, "b.example", secretRef("certs", "b")),
		https("missing", 8443, "m.example", secretRef("", "nope")),
		https("denied", 9443, "d.example", secretRef("other", "b")),
		https("bad", 10443, "x.example", secretRef("", "bad")),
		https("again", 443, "a.example", secretRef("", "a")),
	)
	s := &Snapshot{
		Classes:  []gwv1.GatewayClass{class("baton", DefaultControllerName)},
		Gateways: []gwv1.Gateway{gw},
		Secrets:  map[string]*corev1.Secret{"infra/a": a, "certs/b": b, "infra/bad": bad, "other/b": b},
		Grants: []gwv1.ReferenceGrant{{ObjectMeta: metav1.ObjectMeta{Namespace: "certs", Name: "g"}, Spec: gwv1.ReferenceGrantSpec{
			From: []gwv1.ReferenceGrantFrom{{Group: gwv1.GroupName, Kind: "Gateway", Namespace: "infra"}},
			To:   []gwv1.ReferenceGrantTo{{Kind: "Secret"}},
		}}},
	}
	res := Translate(s, opts)
	for l, want := range map[string]struct{ resolved, conflicted bool }{
		"a": {true, false}, "b": {true, false}, "missing": {false, false}, "denied": {false, false}, "bad": {false, false},
		"again": {true, true},
	} {
		lc := res.ListenerStatus["infra/gw/"+l]
		if lc.ResolvedRefs != want.resolved || lc.Conflicted != want.conflicted {
			t.Errorf("listener %s: %+v, want resolved %v conflicted %v", l, lc, want.resolved, want.conflicted)
		}
	}
	if r := res.ListenerStatus["infra/gw/denied"].ResolvedReason; r != string(gwv1.ListenerReasonRefNotPermitted) {
		t.Errorf("denied: reason %s", r)
	}
	if len(res.Listeners) != 1 || res.Listeners[0].Name != "gw/infra/gw:443" || len(res.Listeners[0].Certificates) != 2 || res.Listeners[0].Protocol != gwv1.HTTPSProtocolType {
		t.Fatalf("listeners %+v, want one on 443 with two certificates", res.Listeners)
	}
	// a's Secret turns invalid: its last good certificate serves on, and
	// the listener says so.
	broken := a.DeepCopy()
	broken.Data["tls.crt"] = []byte("garbage")
	s.Secrets["infra/a"], s.Good = broken, res.Good
	next := Translate(s, opts)
	if lc := next.ListenerStatus["infra/gw/a"]; lc.ResolvedRefs || lc.ResolvedReason != string(gwv1.ListenerReasonInvalidCertificateRef) {
		t.Errorf("a with a broken Secret: %+v", lc)
	}
	if len(next.Listeners) != 1 || len(next.Listeners[0].Certificates) != 2 || string(next.Listeners[0].Certificates[0].CertPEM) != string(a.Data["tls.crt"]) {
		t.Errorf("the last good certificate does not serve on: %+v", next.Listeners)
	}
}
