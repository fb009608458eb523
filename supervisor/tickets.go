package supervisor

import (
	"crypto/rand"
	"time"

	"github.com/baton-proxy/baton/ipc"
	"go.uber.org/zap"
)

// TLS session-ticket keys belong to the supervisor, not to a worker: every
// worker of every generation gets the same ones, so that a client resumes
// its session on any worker and after any handoff. A new key encrypts from
// each rotation on; the previous ones still decrypt until they fall out of
// the list. The keys are opaque bytes to the supervisor.
const (
	// TicketKeyRotation is how often a new session-ticket key is made.
	TicketKeyRotation = time.Hour
	// TicketKeysKept is how many keys decrypt: a ticket stays good for
	// up to TicketKeysKept rotations.
	TicketKeysKept = 6
	// ticketKeyLen is a key's length (crypto/tls takes 32 bytes).
	ticketKeyLen = 32
)

// newTicketKey returns a random key.
func newTicketKey() []byte {
	k := make([]byte, ticketKeyLen)
	rand.Read(k)
	return k
}

// rotateTickets makes a new key the first, drops the oldest past
// TicketKeysKept, and sends the keys to every running worker.
func (s *Supervisor) rotateTickets(now time.Time) {
	st := &s.state
	st.ticketKeys = append([][]byte{newTicketKey()}, st.ticketKeys...)
	if len(st.ticketKeys) > TicketKeysKept {
		st.ticketKeys = st.ticketKeys[:TicketKeysKept]
	}
	st.ticketRotateAt = now.Add(TicketKeyRotation)
	msg := ipc.Tickets{Keys: st.ticketKeys}
	for _, g := range st.gens {
		for _, sl := range g.slots {
			if sl.proc == nil {
				continue
			}
			if err := sl.proc.conn.Send(ipc.TypeTickets, msg); err != nil {
				sl.log().Warn("sending session-ticket keys failed", zap.Error(err))
			}
		}
	}
}
