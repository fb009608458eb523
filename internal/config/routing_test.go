package config

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/baton-proxy/baton/proxy/route"
)

// A routing travels as JSON lines: the head (backends, the providers'
// certificates), then a rule a line. A
// newline in a value (a header's, here) is escaped by the JSON, so it
// cannot split a rule; zero fields stay out, and a pointer to a zero value
// stays apart from none (a Redirect with nothing set is still one).
func TestRoutingLines(t *testing.T) {
	r := Routing{
		Backends: []Backend{{Name: "k8s/ns/app:80", Kubernetes: &KubeService{Service: "ns/app", Port: Port{Number: 80}, Mode: ModeEndpoints}}},
		Rules: []route.Rule[string]{
			{Name: "one", Listener: "web", Hostnames: []string{"a.example"}, Backends: []route.Backend[string]{{Target: "k8s/ns/app:80", Weight: 1}},
				Filters: route.Filters[string]{RequestHeaders: &route.HeaderModifier{Set: []route.Header{{Name: "X-Two-Lines", Value: "a\nb"}}}}},
			{Name: "two", Listener: "web", Filters: route.Filters[string]{Redirect: &route.Redirect{}}},
		},
		Certificates: map[string][]Certificate{"ingress/https": {{CertPEM: []byte("cert"), KeyPEM: []byte("key")}}},
	}
	payload, err := MarshalRouting(r)
	if err != nil {
		t.Fatal(err)
	}
	head, lines, err := RoutingLines(payload)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != len(r.Rules) {
		t.Fatalf("%d rule lines, want %d: %q", len(lines), len(r.Rules), payload)
	}
	got := Routing{Backends: head.Backends, Certificates: head.Certificates}
	for _, l := range lines {
		var rule route.Rule[string]
		if err := json.Unmarshal(l, &rule); err != nil {
			t.Fatal(err)
		}
		got.Rules = append(got.Rules, rule)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, r)
	}
	if _, _, err := RoutingLines([]byte("not json\n{}")); err == nil {
		t.Error("a payload whose first line is not JSON was taken")
	}
}
