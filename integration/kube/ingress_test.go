package kube

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/baton-proxy/baton/ingress"
	"github.com/baton-proxy/baton/integration/internal/certs"
	"github.com/baton-proxy/baton/integration/internal/harness"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ingressAddr is where the Ingress test serves (outside the Gateway pool).
const ingressAddr = "198.18.65.1"

// An Ingress of baton's IngressClass, end to end on a real API server and
// the real binary: its rule served (the Service's port by name, the pods
// its EndpointSlice names), its TLS host served with its Secret's
// certificate and redirected from HTTP (308, ingress-nginx's ssl-redirect),
// its status.loadBalancer the configured address; a change of its rules
// and a second Ingress with the seed's service-upstream annotation go
// live with no handoff.
func TestIngressEndToEnd(t *testing.T) {
	ctx := context.Background()
	if err := addAddr(ingressAddr); err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t)
	clusterIP := "198.18.128.40"
	createService(t, ns, "app", clusterIP)
	v1 := startPod(t, "ing-v1", "198.18.3.21")
	writeSlice(t, ns, "app", []podState{readyPod(v1)})
	kp := startKubeProxy(t, clusterIP, 0)
	kp.setNow([]podState{readyPod(v1)})
	ca := certs.NewCA(t, "ingress test CA")
	crt, key := ca.Issue(t, []string{"secure.example"}, certs.Options{SerialNum: 11})
	if _, err := client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "secure"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b := startBaton(t, fmt.Sprintf(`controlSocket: "@DIR@/run/control.sock"
readyTimeout: 20s
workers: 2
kubernetes:
  kubeconfig: %s
ingress:
  address: %[2]s:80
  tlsAddress: %[2]s:443
`, kubeconfig, ingressAddr))

	class := "baton-" + ns
	if _, err := client.NetworkingV1().IngressClasses().Create(ctx, &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec: networkingv1.IngressClassSpec{Controller: ingress.ControllerName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		client.NetworkingV1().IngressClasses().Delete(context.Background(), class, metav1.DeleteOptions{})
	})
	prefix := networkingv1.PathTypePrefix
	rule := func(host, p string) networkingv1.IngressRule {
		return networkingv1.IngressRule{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
			Path: p, PathType: &prefix, Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "app", Port: networkingv1.ServiceBackendPort{Name: "http"}}},
		}}}}}
	}
	app := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Spec: networkingv1.IngressSpec{
		IngressClassName: &class,
		Rules:            []networkingv1.IngressRule{rule("app.example", "/"), rule("secure.example", "/")},
		TLS:              []networkingv1.IngressTLS{{Hosts: []string{"secure.example"}, SecretName: "secure"}},
	}}
	if _, err := client.NetworkingV1().Ingresses(ns).Create(ctx, app, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	plain := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	secure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool, ServerName: "secure.example"}}}
	get := func(c *http.Client, url, host string) (int, string, string) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Host = host
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error(), ""
		}
		defer resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("X-Backend"), resp.Header.Get("Location")
	}
	httpURL, httpsURL := "http://"+ingressAddr+"/x", "https://"+ingressAddr+"/x"
	harness.WaitFor(t, 60*time.Second, "the Ingress rule served", func() bool { code, be, _ := get(plain, httpURL, "app.example"); return code == 200 && be == "ing-v1" })
	harness.WaitFor(t, 60*time.Second, "the TLS host served with its Secret's certificate", func() bool {
		code, be, _ := get(secure, httpsURL, "secure.example")
		return code == 200 && be == "ing-v1"
	})
	if code, _, loc := get(plain, httpURL, "secure.example"); code != http.StatusPermanentRedirect || loc != "https://secure.example/x" {
		t.Errorf("HTTP to a TLS host: %d Location %q, want 308 to https://secure.example/x", code, loc)
	}
	if code, _, _ := get(plain, httpURL, "other.example"); code != 404 {
		t.Errorf("a host no rule takes: %d, want 404", code)
	}
	harness.WaitFor(t, 30*time.Second, "status.loadBalancer written", func() bool {
		cur, err := client.NetworkingV1().Ingresses(ns).Get(ctx, "app", metav1.GetOptions{})
		return err == nil && len(cur.Status.LoadBalancer.Ingress) == 1 && cur.Status.LoadBalancer.Ingress[0].IP == ingressAddr
	})

	// Rules change, and a second Ingress routes through the ClusterIP:
	// inside the workers, no handoff.
	gen := b.Status().ActiveGeneration
	cur, err := client.NetworkingV1().Ingresses(ns).Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Rules[0] = rule("new.example", "/x")
	if _, err := client.NetworkingV1().Ingresses(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	up := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "up", Annotations: map[string]string{"nginx.ingress.kubernetes.io/service-upstream": "true"}},
		Spec: networkingv1.IngressSpec{IngressClassName: &class, Rules: []networkingv1.IngressRule{rule("up.example", "/")}}}
	if _, err := client.NetworkingV1().Ingresses(ns).Create(ctx, up, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 30*time.Second, "the changed rule served", func() bool { code, _, _ := get(plain, httpURL, "new.example"); return code == 200 })
	if code, _, _ := get(plain, httpURL, "app.example"); code != 404 {
		t.Errorf("the host the rule left: %d, want 404", code)
	}
	harness.WaitFor(t, 30*time.Second, "the service-upstream Ingress served", func() bool { code, be, _ := get(plain, httpURL, "up.example"); return code == 200 && be == "ing-v1" })
	st := b.Status()
	modes := map[string]string{}
	for _, be := range st.Backends {
		modes[be.Name] = be.Mode
	}
	if modes["k8s/"+ns+"/app:http/clusterIP"] != "clusterIP" || modes["k8s/"+ns+"/app:http"] != "endpoints" {
		t.Errorf("backends: %v, want the Service's endpoints and, for service-upstream, its ClusterIP", modes)
	}
	if st.ActiveGeneration != gen {
		t.Errorf("an Ingress change made a handoff: generation %d, then %d", gen, st.ActiveGeneration)
	}
}
