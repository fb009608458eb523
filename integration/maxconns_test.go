package integration

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// http.maxConnections (nginx's worker_connections, HAProxy's maxconn;
// issue 23's answer to tens of thousands of idle or slowloris connections)
// bounds a worker's client connections: one accepted beyond it is closed
// at once, without a response, and counted in
// baton_connections_refused_total; the connections already admitted
// serve on; once one closes, a new one is admitted.
func TestMaxConnections(t *testing.T) {
	be := startBackend(t)
	maddr := freePort(t)
	b := startBaton(t, options{extra: fmt.Sprintf("http:\n  maxConnections: 4\nmetrics:\n  address: %s\n", maddr)}.configYAML(be))
	web := b.Address("web")
	type conn struct {
		c  net.Conn
		br *bufio.Reader
	}
	get := func(c conn) (int, error) {
		c.c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c.c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return 0, err
		}
		resp, err := http.ReadResponse(c.br, nil)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	dial := func() conn {
		c, err := net.Dial("tcp", web)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return conn{c, bufio.NewReader(c)}
	}
	var admitted []conn
	for i := range 4 {
		c := dial()
		if code, err := get(c); code != 200 {
			t.Fatalf("connection %d of 4: %d %v", i, code, err)
		}
		admitted = append(admitted, c)
	}
	over := dial()
	if code, err := get(over); err == nil {
		t.Fatalf("a fifth connection with maxConnections 4: answered %d", code)
	}
	waitFor(t, 10*time.Second, "the refused connection counted", func() bool {
		v, ok := scrapeMaybe(t, maddr, `baton_connections_refused_total{listener="web"}`)
		return ok && v == 1
	})
	for i, c := range admitted {
		if code, err := get(c); code != 200 {
			t.Errorf("admitted connection %d after the refusal: %d %v", i, code, err)
		}
	}
	admitted[0].c.Close()
	waitFor(t, 10*time.Second, "a new connection admitted once one closed", func() bool {
		code, _ := get(dial())
		return code == 200
	})
}
