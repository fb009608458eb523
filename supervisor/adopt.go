package supervisor

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/baton-proxy/baton/ipc"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Workers outlive their supervisor. When a supervisor dies (SIGKILL, OOM),
// its serving workers keep serving on the sockets they hold and wait, each
// on an abstract unix socket named after the control socket, for a new
// supervisor to adopt them (ipc.Orphans). The next supervisor started with
// the same control socket finds them there before it binds anything, takes
// back the listening sockets from them, and makes them its generations:
// the newest active, any older one draining. Workers not adopted within
// orphanTimeout drain and exit.

// orphanName is the abstract socket prefix under which the workers of a
// supervisor with this control socket wait to be adopted.
func orphanName(controlSocket string) string {
	sum := sha256.Sum256([]byte(controlSocket))
	return "baton-orphans-" + hex.EncodeToString(sum[:8])
}

// findOrphans lists the abstract sockets of /proc/net/unix that start with
// prefix + "/", without their '@'.
func findOrphans(prefix string) ([]string, error) {
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 {
			continue
		}
		// Listening sockets only (state 01 is SS_UNCONNECTED, flags
		// 00010000 is __SO_ACCEPTCON).
		if name, ok := strings.CutPrefix(fields[len(fields)-1], "@"+prefix+"/"); ok && fields[3] == "00010000" {
			names = append(names, prefix+"/"+name)
		}
	}
	return names, sc.Err()
}

// orphan is a worker being adopted: its connection, what it said, and the
// listening sockets it sent.
type orphan struct {
	conn  *ipc.Conn
	pid   int
	msg   ipc.Orphan
	files []*os.File
}

// adopt takes over the workers a dead supervisor with the same control
// socket left serving, if any: their sockets join the socket table and
// they become generations of this supervisor. It returns the active one,
// or nil when there was none to adopt. cfg is this supervisor's config.
func (s *Supervisor) adopt(cfg *Config) *generation {
	names, err := findOrphans(orphanName(cfg.ControlSocket))
	if err != nil || len(names) == 0 {
		return nil
	}
	var orphans []*orphan
	for _, name := range names {
		o, err := s.callOrphan(name, cfg)
		if err != nil {
			s.log.Warn("adoption: an orphaned worker could not be adopted", zap.String("socket", name), zap.Error(err))
			continue
		}
		orphans = append(orphans, o)
	}
	if len(orphans) == 0 {
		return nil
	}
	st := &s.state
	byGen := make(map[uint64][]*orphan)
	for _, o := range orphans {
		byGen[o.msg.Generation] = append(byGen[o.msg.Generation], o)
	}
	ids := make([]uint64, 0, len(byGen))
	for id := range byGen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	// The newest generation's session-ticket keys keep its clients'
	// sessions resumable.
	if keys := byGen[ids[len(ids)-1]][0].msg.TicketKeys; len(keys) > 0 {
		st.ticketKeys = keys
	}
	h := s.newHandoff("adopt", len(orphans))
	// The newest generation serves on, unless it is a canary whose active
	// generation is here too: it was never promoted, and is aborted.
	newest := ids[len(ids)-1]
	for i := len(ids) - 1; i >= 0; i-- {
		if base := byGen[ids[i]][0].msg.CanaryOf; base == 0 || byGen[base] == nil {
			newest = ids[i]
			break
		}
	}
	var active *generation
	for _, id := range ids {
		g := s.adoptGeneration(id, byGen[id], cfg)
		st.nextGen = max(st.nextGen, id)
		switch {
		case id == newest:
			active = g
		case id > newest:
			s.drain(g, fmt.Sprintf("adopted: a canary beside generation %d, whose supervisor died; aborted", newest), time.Now().Add(cfg.DrainTimeout))
		default:
			s.drain(g, fmt.Sprintf("adopted, with generation %d newer", newest), time.Now().Add(cfg.DrainTimeout))
		}
	}
	h.To = active.id
	active.handoff = h
	st.active = active
	active.state = GenActive
	s.finishHandoff(h, OutcomeOK, "")
	s.log.Info("adopted the workers of a supervisor that died", zap.Int("workers", len(orphans)), zap.Uint64("active", active.id), zap.Int("generations", len(ids)))
	return active
}

// callOrphan connects to one orphan and reads what it is and holds. Only
// workers of this uid, or of the configured worker user, are adopted.
func (s *Supervisor) callOrphan(name string, cfg *Config) (*orphan, error) {
	c, err := ipc.DialOrphan(name)
	if err != nil {
		return nil, err
	}
	uid, pid, err := c.Peer()
	if err != nil {
		c.Close()
		return nil, err
	}
	if uid != os.Geteuid() && (cfg.WorkerCredential == nil || uint32(uid) != cfg.WorkerCredential.Uid) {
		c.Close()
		return nil, fmt.Errorf("it runs as uid %d, neither this supervisor's nor the configured worker user's", uid)
	}
	c.SetDeadline(time.Now().Add(ipc.AdoptionTimeout))
	fr, files, err := c.Receive()
	o := &orphan{conn: c, pid: pid, files: files}
	fail := func(err error) (*orphan, error) {
		o.close()
		return nil, err
	}
	switch {
	case err != nil:
		return fail(err)
	case fr.Type != ipc.TypeOrphan:
		return fail(fmt.Errorf("%w: %s instead of orphan", ipc.ErrUnexpected, fr.Type))
	}
	if err := fr.Unmarshal(&o.msg); err != nil {
		return fail(err)
	}
	if o.msg.Files() != len(files) {
		return fail(fmt.Errorf("%w: orphan announces %d descriptors, %d came", ipc.ErrMalformed, o.msg.Files(), len(files)))
	}
	return o, nil
}

func (o *orphan) close() {
	o.conn.Close()
	for _, f := range o.files {
		f.Close()
	}
}

// adoptGeneration makes one generation of orphans: its sockets into the
// socket table (missing members of a reuseport group are opened anew), its
// workers into slots (missing ones restarted, as after a death).
func (s *Supervisor) adoptGeneration(id uint64, orphans []*orphan, cfg *Config) *generation {
	st := &s.state
	first := orphans[0].msg
	gcfg := *cfg
	gcfg.Workers = first.Workers
	gcfg.Payload = first.Config
	g := &generation{id: id, state: GenActive, cfg: &gcfg, binary: s.opts.Binary, startedAt: time.Now(), plan: &plan{}}
	g.log = s.log.With(zap.Uint64("generation", g.id))
	// Sockets: each orphan sent the ones it held (its slot's, and those it
	// helps with): copies of one socket are closed but one.
	groups := make(map[string]*group)
	for _, o := range orphans {
		i := 0
		for _, info := range o.msg.Listeners {
			gr := groups[info.Key]
			if gr == nil {
				if gr = st.sockets.groups[info.Key]; gr == nil {
					gr = &group{key: info.Key, network: info.Network, address: info.Address, reusePort: info.ReusePort, sockets: make([]*socket, max(info.GroupSize, 1))}
					st.sockets.groups[info.Key] = gr
				}
				groups[info.Key] = gr
			}
			for _, idx := range info.Sockets {
				f := o.files[i]
				i++
				if idx < len(gr.sockets) && gr.sockets[idx] == nil {
					gr.sockets[idx] = &socket{file: f}
				} else {
					f.Close() // a copy another orphan of the group sent too
				}
			}
		}
		o.files = nil
	}
	for _, info := range first.Listeners {
		gr := groups[info.Key]
		for i, sk := range gr.sockets {
			if sk != nil {
				continue
			}
			// Its only holder is gone: a new member takes its place.
			f, err := listen(gr.network, gr.address, gr.reusePort, gr.freeBind)
			if err != nil {
				g.log.Error("adoption: cannot reopen a socket of the group", zap.String("listener", info.Name), zap.Int("socket", i), zap.Error(err))
				continue
			}
			gr.sockets[i] = &socket{file: f}
		}
		gr.sockets = slices.DeleteFunc(gr.sockets, func(sk *socket) bool { return sk == nil })
		if gr.current == nil && len(gr.sockets) > 0 {
			st.sockets.startSteering(gr)
		}
		g.plan.listeners = append(g.plan.listeners, plannedListener{
			spec:    ListenerSpec{Name: info.Name, Network: info.Network, Address: info.Address, Protocol: info.Protocol, ReusePort: info.ReusePort, Sockets: info.GroupSize},
			group:   gr,
			sockets: gr.current,
		})
		for _, sk := range gr.current {
			sk.refs++
			sk.serving++
		}
	}
	// Workers.
	for i := range first.Workers {
		g.slots = append(g.slots, &slot{gen: g, index: i, state: WorkerBackoff, restartAt: time.Now()})
	}
	for _, o := range orphans {
		if o.msg.Slot < 0 || o.msg.Slot >= len(g.slots) || g.slots[o.msg.Slot].proc != nil {
			o.close()
			continue
		}
		sl := g.slots[o.msg.Slot]
		ap, err := adoptProcess(o.pid)
		if err == nil {
			err = o.conn.Send(ipc.TypeAdopted, ipc.Adopted{Generation: id})
		}
		if err != nil {
			g.log.Warn("adoption: a worker could not be adopted", zap.Int("pid", o.pid), zap.Error(err))
			o.close()
			continue
		}
		o.conn.SetDeadline(time.Time{})
		now := time.Now()
		p := &proc{slot: sl, p: ap, conn: o.conn, startedAt: now, readDone: make(chan struct{}), acks: o.msg.Acks}
		sl.proc, sl.pid, sl.state, sl.startedAt, sl.readyAt, sl.lastSeen = p, o.pid, WorkerReady, now, now, now
		s.owned.Add(2)
		go s.readProc(p)
		go s.waitProc(p)
		g.log.Info("adopted worker", zap.Int("slot", sl.index), zap.Int("pid", o.pid))
	}
	st.gens = append(st.gens, g)
	return g
}

// adoptedProcess is a worker this supervisor did not start: not its child,
// so it cannot wait for it; a pidfd signals it and tells when it exits
// without the risk of a reused pid.
type adoptedProcess struct {
	pid   int
	pidfd int
}

func adoptProcess(pid int) (*adoptedProcess, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd of %d: %w", pid, err)
	}
	unix.CloseOnExec(fd)
	return &adoptedProcess{pid: pid, pidfd: fd}, nil
}

func (p *adoptedProcess) Pid() int { return p.pid }

func (p *adoptedProcess) Signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return errors.New("unsupported signal")
	}
	return unix.PidfdSendSignal(p.pidfd, s, nil, 0)
}

// errAdoptedExit is an adopted worker's exit: its status is its dead
// parent's to know.
var errAdoptedExit = errors.New("exited (an adopted worker: status unknown)")

// Wait waits until the process has exited: its pidfd becomes readable.
func (p *adoptedProcess) Wait() error {
	defer unix.Close(p.pidfd)
	fds := []unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("wait for adopted worker %d: %w", p.pid, err)
		}
		if fds[0].Revents != 0 {
			return errAdoptedExit
		}
	}
}
