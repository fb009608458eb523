package supervisor

import (
	"github.com/baton-proxy/baton/ipc"
	"go.uber.org/zap"
)

// Routing is relayed, not understood: a route provider beside the
// supervisor (the Gateway API's controller) computes a payload of routes
// and backends, and the supervisor keeps the last one and hands it to
// every worker, those serving (a Routing message) and those it starts
// (announced in their hello, sent right after it, applied before they say
// ready). Routes change without a generation; the payload is the
// provider's and the workers' business.

// SetRouting makes payload the workers' routing, now and for every worker
// started from now on. It returns once the loop has taken it (or the
// supervisor is gone).
func (s *Supervisor) SetRouting(payload []byte) error {
	f, err := ipc.RoutingFile(payload)
	if err != nil {
		return err
	}
	if !s.send(routingEvent{file: f, size: int64(len(payload))}) {
		f.Close()
		return ErrStopping
	}
	return nil
}

// handleRouting keeps the routing file (closing the one it replaces) and
// sends it to every running worker.
func (s *Supervisor) handleRouting(ev routingEvent) {
	st := &s.state
	if st.routing != nil {
		st.routing.Close()
	}
	st.routing, st.routingSize = ev.file, ev.size
	st.routingVersion++
	for _, g := range st.gens {
		for _, sl := range g.slots {
			if sl.proc != nil {
				s.sendRouting(sl, g.state == GenDraining)
			}
		}
	}
}

// sendRouting sends the routing to sl's worker, of a draining generation
// or not. A failure is the worker's end; its exit decides what follows.
func (s *Supervisor) sendRouting(sl *slot, draining bool) {
	st := &s.state
	if st.routing == nil {
		return
	}
	if err := sl.proc.conn.Send(ipc.TypeRouting, ipc.Routing{Size: st.routingSize, Version: st.routingVersion}, st.routing); err != nil {
		if draining {
			// A worker of a draining generation that is exiting: the
			// routing was for its last requests, if any.
			sl.log().Debug("sending the routing to a draining worker failed", zap.Error(err))
			return
		}
		sl.log().Warn("sending the routing failed", zap.Error(err))
	}
}

// closeRouting lets go of the routing file at the loop's end.
func (s *Supervisor) closeRouting() {
	if f := s.state.routing; f != nil {
		f.Close()
		s.state.routing = nil
	}
}
