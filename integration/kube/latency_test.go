package kube

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/baton-proxy/baton/proxy/kube"
	"go.uber.org/zap"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkEndpointSliceToRoute measures how long a change written to an
// EndpointSlice takes to reach baton's routing: from the API write to the
// new endpoint set being applied, through a real API server, client-go's
// watch and informers, and baton's batching. Reported as p50-ms and
// p99-ms, for a Service of 10 and of 10,000 endpoints (slices of 100).
//
//	go test -run '^$' -bench EndpointSliceToRoute -benchtime 200x ./integration/kube/
func BenchmarkEndpointSliceToRoute(b *testing.B) {
	for _, n := range []int{10, 10000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) { sliceLatency(b, n) })
	}
}

func sliceLatency(b *testing.B, n int) {
	ns := newNamespace(b)
	createService(b, ns, "big", "")
	ctx := context.Background()
	var sls []*discoveryv1.EndpointSlice
	for s := 0; s*100 < n; s++ {
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("big-%d", s), Labels: map[string]string{discoveryv1.LabelServiceName: "big"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}},
		}
		for i := s * 100; i < min(n, (s+1)*100); i++ {
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{fmt.Sprintf("198.19.%d.%d", i/250, i%250+1)},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)},
			})
		}
		created, err := client.DiscoveryV1().EndpointSlices(ns).Create(ctx, sl, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		sls = append(sls, created)
	}
	// The last batch's count of ready endpoints, as baton's apply sees it.
	applied := make(chan int, 64)
	source, err := kube.NewClient(kubeconfig, "baton-bench") // what a worker uses
	if err != nil {
		b.Fatal(err)
	}
	w := kube.New(source, []kube.Target{{Backend: "big", Namespace: ns, Service: "big", PortName: "http", Mode: kube.ModeEndpoints}},
		func(us []kube.Update) {
			for _, u := range us {
				ready := 0
				for _, e := range u.Endpoints {
					if e.Ready {
						ready++
					}
				}
				applied <- ready
			}
		}, zap.NewNop())
	wctx, cancel := context.WithCancel(ctx)
	synced := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(wctx, synced)
	}()
	defer func() {
		cancel()
		<-done
	}()
	if err := <-synced; err != nil {
		b.Fatal(err)
	}
	if got := <-applied; got != n {
		b.Fatalf("first set: %d ready, want %d", got, n)
	}
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		// Take one endpoint out of ready, or put it back.
		sl := sls[i%len(sls)]
		ep := &sl.Endpoints[0]
		nowReady := !*ep.Conditions.Ready
		ep.Conditions.Ready = ptr(nowReady)
		want := n - 1
		if nowReady {
			want = n
		}
		start := time.Now()
		updated, err := client.DiscoveryV1().EndpointSlices(ns).Update(ctx, sl, metav1.UpdateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		sls[i%len(sls)] = updated
		for got := <-applied; got != want; got = <-applied {
		}
		lat = append(lat, time.Since(start))
		if !nowReady {
			// Put it back so that every change starts from all ready.
			updated.Endpoints[0].Conditions.Ready = ptr(true)
			back, err := client.DiscoveryV1().EndpointSlices(ns).Update(ctx, updated, metav1.UpdateOptions{})
			if err != nil {
				b.Fatal(err)
			}
			sls[i%len(sls)] = back
			for got := <-applied; got != n; got = <-applied {
			}
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op")
}
