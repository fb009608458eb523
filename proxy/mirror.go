package proxy

import (
	"bufio"
	"bytes"
	"math/rand/v2"
	"time"

	"github.com/baton-proxy/baton/proxy/h1"
)

// maxMirrors bounds the mirrored requests in flight per frontend: past it
// a copy is dropped, so that a slow mirror never costs the requests it
// copies more than the copying.
const maxMirrors = 256

// mirror sends a copy of a request, as it goes upstream, to each of its
// rule's mirrors (the Gateway API's RequestMirror), once per request (not
// again for a retry), and drops their answers. A request whose body
// streams is not mirrored: only one without a body, or with a body read
// whole before (a route's bufferRequestBody), can be sent twice. The copy
// is made now; each mirror's exchange runs in a goroutine of its own that
// the frontend's drain waits for, bounded by the backend's connect and
// response timeouts.
func (f *httpFrontend) mirror(rt *routed, req *h1.Request, state bodyState, body []byte, fwd h1.Forwarded) {
	ms := rt.rule.Filters.Mirrors
	if len(ms) == 0 || rt.mirrored {
		return
	}
	rt.mirrored = true
	if req.HasBody() && state != bodyWhole {
		return
	}
	for _, m := range ms {
		if m.Percent > 0 && m.Percent < 100 && rand.IntN(100) >= m.Percent {
			continue
		}
		b := m.Target
		set := b.set.Load()
		var a attempt
		ep := b.pick(set, &a)
		if ep == nil {
			continue
		}
		select {
		case f.mirrors <- struct{}{}:
		default:
			continue // maxMirrors in flight: this copy is dropped
		}
		var head bytes.Buffer
		w := bufio.NewWriter(&head)
		framing := h1.Framing{Length: -1}
		if state == bodyWhole {
			framing.Length = int64(len(body))
		}
		fwd.Host = ep.addr
		rt.forwarded(&fwd, req)
		req.WriteHead(w, framing, &fwd)
		if state == bodyWhole {
			w.Write(body)
		}
		w.Flush()
		f.mirrored.Add(1)
		f.mirroring.Go(func() {
			defer func() { <-f.mirrors }()
			mirrorOnce(b, ep, head.Bytes())
		})
	}
}

// mirrorOnce sends a mirrored request on a new connection to ep and reads
// its response's head, then closes the connection: the answer is nobody's.
func mirrorOnce(b *backend, ep *endpoint, req []byte) {
	var w upstreamWork
	uc, err := ep.conn(&w, b, true)
	if err != nil {
		return
	}
	defer uc.c.Close()
	uc.c.SetDeadline(time.Now().Add(b.responseTimeout))
	if _, err := uc.c.Write(req); err != nil {
		return
	}
	uc.rd.ReadResponseHead()
}
