package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/baton-proxy/baton/supervisor"
)

// A generation's life as the status page and `baton status` draw it.
type segment struct {
	state    string // starting, active, canary, draining, failed
	from, to time.Time
}

type genLife struct {
	id    uint64
	state supervisor.GenState
	segs  []segment
	// drained is how long its drain took, once it has ended (0: not yet,
	// or it did not drain).
	drained time.Duration
}

// lives returns each generation's life from the status's handoffs:
// starting until ready; active, or canary until its verdict; draining from
// when the next one took over (or it was aborted) until its last worker
// exited, or now. status.js draws the same.
func lives(st *supervisor.Status, now time.Time) []genLife {
	out := make([]genLife, len(st.Generations))
	for i, g := range st.Generations {
		out[i] = life(&g, st.Handoffs, now)
	}
	return out
}

// life is generation g's, from the handoffs that made it and ended it.
func life(g *supervisor.GenerationStatus, handoffs []supervisor.Handoff, now time.Time) genLife {
	l := genLife{id: g.ID, state: g.State}
	var made, ended *supervisor.Handoff
	for i := range handoffs {
		h := &handoffs[i]
		if h.To == g.ID && made == nil {
			made = h
		}
		if h.From == g.ID && h.Outcome == supervisor.OutcomeOK && (h.Canary == nil || h.Canary.Verdict != "") {
			ended = h
		}
	}
	start := g.StartedAt
	if g.State == supervisor.GenFailed || made != nil && made.Outcome == supervisor.OutcomeFailed {
		end := start.Add(time.Second)
		if made != nil {
			end = made.StartedAt.Add(time.Duration(made.DurationMs) * time.Millisecond)
		}
		l.segs = append(l.segs, segment{"failed", start, end})
		return l
	}
	if g.State == supervisor.GenStarting {
		l.segs = append(l.segs, segment{"starting", start, now})
		return l
	}
	from := start
	if made != nil && made.ReadyMs > 0 {
		from = made.StartedAt.Add(time.Duration(made.ReadyMs) * time.Millisecond)
	}
	l.segs = append(l.segs, segment{"starting", start, from})
	if made != nil && made.Canary != nil {
		c := made.Canary
		decided := now
		if !c.DecidedAt.IsZero() {
			decided = c.DecidedAt
		}
		l.segs = append(l.segs, segment{"canary", from, decided})
		from = decided
		switch c.Verdict {
		case "aborted":
			l.drain(decided, made.DrainMs, now)
			return l
		case "":
			return l // still a canary
		}
	}
	if ended == nil {
		// Active still, or drained by a stop (its handoff no longer listed).
		l.segs = append(l.segs, segment{"active", from, now})
		return l
	}
	drain := ended.StartedAt.Add(time.Duration(ended.ReadyMs) * time.Millisecond)
	if ended.Canary != nil && !ended.Canary.DecidedAt.IsZero() {
		drain = ended.Canary.DecidedAt
	}
	l.segs = append(l.segs, segment{"active", from, drain})
	l.drain(drain, ended.DrainMs, now)
	return l
}

// drain adds l's draining from from: drainMs long when it has ended (its
// handoff says), none for an exited generation that does not say, else
// until now.
func (l *genLife) drain(from time.Time, drainMs *int64, now time.Time) {
	to := now
	switch {
	case drainMs != nil:
		l.drained = time.Duration(*drainMs) * time.Millisecond
		to = from.Add(l.drained)
	case l.state == supervisor.GenExited:
		to = from
	}
	l.segs = append(l.segs, segment{"draining", from, to})
}

// marks are the characters a state is drawn with.
var marks = map[string]rune{"starting": '·', "active": '█', "canary": '▓', "draining": '░', "failed": 'x'}

// timelineWidth is the bar's width in characters.
const timelineWidth = 60

// printTimeline draws which generation served when: a row per generation
// of the last ones, over the last minute or since the oldest shown began.
func printTimeline(w io.Writer, st *supervisor.Status, now time.Time) {
	ls := lives(st, now)
	if len(ls) > 6 {
		ls = ls[len(ls)-6:]
	}
	if len(ls) == 0 {
		return
	}
	from := now.Add(-time.Minute)
	for _, l := range ls {
		if len(l.segs) > 0 && l.segs[0].from.Before(from) {
			from = l.segs[0].from
		}
	}
	span := now.Sub(from)
	col := func(t time.Time) int {
		c := int(float64(t.Sub(from)) / float64(span) * timelineWidth)
		return min(max(c, 0), timelineWidth-1)
	}
	fmt.Fprintf(w, "\nTIMELINE %s %s %s\n", from.Local().Format("15:04:05"), strings.Repeat("─", timelineWidth-18), now.Local().Format("15:04:05"))
	for _, l := range ls {
		bar := []rune(strings.Repeat(" ", timelineWidth))
		for _, s := range l.segs {
			for c := col(s.from); c <= col(s.to) && c < timelineWidth; c++ {
				if s.state != "starting" || bar[c] == ' ' {
					bar[c] = marks[s.state]
				}
			}
		}
		note := l.state.String()
		if l.drained > 0 {
			note += fmt.Sprintf(", drained in %s", l.drained.Round(time.Millisecond))
		}
		fmt.Fprintf(w, "gen %-4d %s %s\n", l.id, string(bar), note)
	}
	fmt.Fprintln(w, "         · starting  █ active  ▓ canary  ░ draining  x failed")
}
