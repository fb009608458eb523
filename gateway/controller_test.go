package gateway

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// A status write (the controller's own, most often) is no change to
// translate; a change of spec (generation), labels or annotations is, and
// so is any change of an object without a generation.
func TestStatusOnly(t *testing.T) {
	route := func(gen int64, labels map[string]string, parents int) *gwv1.HTTPRoute {
		r := &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Name: "r", Generation: gen, Labels: labels}}
		r.Status.Parents = make([]gwv1.RouteParentStatus, parents)
		return r
	}
	for _, tc := range []struct {
		name     string
		old, cur any
		want     bool
	}{
		{"status written", route(1, nil, 0), route(1, nil, 1), true},
		{"spec changed", route(1, nil, 1), route(2, nil, 1), false},
		{"labels changed", route(1, nil, 0), route(1, map[string]string{"a": "b"}, 0), false},
		{"a Service", &corev1.Service{}, &corev1.Service{}, false},
	} {
		if got := statusOnly(tc.old, tc.cur); got != tc.want {
			t.Errorf("%s: statusOnly %v, want %v", tc.name, got, tc.want)
		}
	}
}
