package ipc_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/baton-proxy/baton/ipc"
)

// Example shows a Go HTTP server as a baton worker: it takes its listeners
// from the supervisor, says ready once it serves, and drains when told to.
// A real worker calls ipc.Connect(); here a stand-in supervisor plays the
// other end in-process.
func Example() {
	workerEnd, supervisor := fakeSupervisor()
	defer supervisor.Close()

	w, err := ipc.ConnectFile(workerEnd) // a real worker: ipc.Connect()
	workerEnd.Close()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()

	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(rw, "hello from generation", w.Hello().Generation)
	})}
	served := make(chan struct{})
	for _, l := range w.Listeners() {
		for _, ln := range l.Listeners {
			go func() { srv.Serve(ln); served <- struct{}{} }()
		}
	}
	if err := w.Ready(); err != nil {
		fmt.Println(err)
		return
	}

	// The supervisor, seeing ready, tells the worker to drain.
	fr, _, _ := supervisor.Receive()
	fmt.Println("supervisor received", fr.Type)
	supervisor.Send(ipc.TypeDrain, ipc.Drain{Deadline: time.Now().Add(5 * time.Second)})

	<-w.Draining()
	ctx, cancel := context.WithDeadline(context.Background(), w.DrainInfo().Deadline)
	defer cancel()
	srv.Shutdown(ctx)
	<-served
	fmt.Println("worker drained")
	// Output:
	// supervisor received ready
	// worker drained
}

// fakeSupervisor opens a listener and a socket pair and sends the hello a
// supervisor would send, returning the worker's end and its own.
func fakeSupervisor() (*os.File, *ipc.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close() // the worker receives its own descriptor
	lf, _ := ln.(*net.TCPListener).File()
	defer lf.Close()
	sup, end, err := ipc.NewPair()
	if err != nil {
		panic(err)
	}
	hello := ipc.Hello{Generation: 1, Workers: 1, Listeners: []ipc.ListenerInfo{
		{Name: "web", Network: "tcp4", Address: ln.Addr().String(), Protocol: "http", Sockets: []int{0}},
	}}
	if err := sup.Send(ipc.TypeHello, hello, lf); err != nil {
		panic(err)
	}
	return end, sup
}
