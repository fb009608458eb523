package proxy

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/ipc"
	"go.uber.org/zap/zaptest"
)

// A worker whose hello announces a routing says which routing it applied
// before it says ready. The supervisor counts a ready worker that reports
// an older routing than the last it sent as behind (Status.RoutingBehind,
// baton_workers_routing_behind): a worker that said ready first showed as
// behind until its first stats came, every time a generation started.
func TestWorkerReportsRoutingBeforeReady(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lf, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	cfg, err := config.Parse([]byte(strings.ReplaceAll(webConfig("127.0.0.1:1"), "@WEB@", ln.Addr().String())))
	if err != nil {
		t.Fatal(err)
	}
	payload, err := cfg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	sup, end, err := ipc.NewPair()
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close()
	hello := ipc.Hello{Generation: 1, Workers: 1, Config: payload, Routing: true,
		Listeners: []ipc.ListenerInfo{{Name: "web", Network: "tcp4", Address: ln.Addr().String(), Sockets: []int{0}}}}
	if err := sup.Send(ipc.TypeHello, hello, lf); err != nil {
		t.Fatal(err)
	}
	routing := routingPayload(t, config.Routing{})
	rf, err := ipc.RoutingFile(routing)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	const version = 7
	if err := sup.Send(ipc.TypeRouting, ipc.Routing{Size: int64(len(routing)), Version: version}, rf); err != nil {
		t.Fatal(err)
	}
	w, err := ipc.ConnectFile(end)
	end.Close() // as the supervisor closes the worker's end once it runs
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- RunWorker(context.Background(), w, zaptest.NewLogger(t), nil) }()
	defer func() {
		if err := sup.Send(ipc.TypeDrain, ipc.Drain{Deadline: time.Now().Add(5 * time.Second)}); err != nil {
			t.Error(err)
		}
		if err := <-done; err != nil {
			t.Errorf("RunWorker: %v", err)
		}
		w.Close()
	}()

	var reported uint64 // the routing version of the last stats before ready
	sup.SetDeadline(time.Now().Add(time.Minute))
	for {
		fr, files, err := sup.Receive()
		for _, f := range files {
			f.Close()
		}
		if err != nil {
			t.Fatalf("before ready: %v", err)
		}
		switch fr.Type {
		case ipc.TypeStats:
			var s ipc.Stats
			if err := fr.Unmarshal(&s); err != nil {
				t.Fatal(err)
			}
			reported = s.RoutingVersion
		case ipc.TypeReady:
			if reported != version {
				t.Errorf("ready with routing %d reported, want %d: a status between ready and the stats shows the worker behind", reported, version)
			}
			return
		default:
			t.Fatalf("%s before ready", fr.Type)
		}
	}
}
