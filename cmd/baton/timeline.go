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
	var out []genLife
	for _, g := range st.Generations {
		l := genLife{id: g.ID, state: g.State}
		var made, ended *supervisor.Handoff
		for i := range st.Handoffs {
			h := &st.Handoffs[i]
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
			out = append(out, l)
			continue
		}
		ready := start
		if made != nil && made.ReadyMs > 0 {
			ready = made.StartedAt.Add(time.Duration(made.ReadyMs) * time.Millisecond)
		}
		if g.State == supervisor.GenStarting {
			l.segs = append(l.segs, segment{"starting", start, now})
			out = append(out, l)
			continue
		}
		l.segs = append(l.segs, segment{"starting", start, ready})
		from := ready
		if made != nil && made.Canary != nil {
			decided := now
			if !made.Canary.DecidedAt.IsZero() {
				decided = made.Canary.DecidedAt
			}
			l.segs = append(l.segs, segment{"canary", from, decided})
			from = decided
			if made.Canary.Verdict == "aborted" {
				l.segs = append(l.segs, drainSeg(decided, made.DrainMs, g.State, now, &l))
				out = append(out, l)
				continue
			}
			if made.Canary.Verdict == "" {
				out = append(out, l)
				continue
			}
		}
		switch {
		case ended != nil:
			drain := ended.StartedAt.Add(time.Duration(ended.ReadyMs) * time.Millisecond)
			if ended.Canary != nil && !ended.Canary.DecidedAt.IsZero() {
				drain = ended.Canary.DecidedAt
			}
			l.segs = append(l.segs, segment{"active", from, drain}, drainSeg(drain, ended.DrainMs, g.State, now, &l))
		case g.State == supervisor.GenDraining || g.State == supervisor.GenExited:
			l.segs = append(l.segs, segment{"active", from, now}) // drained by a stop, its handoff no longer listed
		default:
			l.segs = append(l.segs, segment{"active", from, now})
		}
		out = append(out, l)
	}
	return out
}

func drainSeg(from time.Time, drainMs *int64, state supervisor.GenState, now time.Time, l *genLife) segment {
	switch {
	case drainMs != nil:
		l.drained = time.Duration(*drainMs) * time.Millisecond
		return segment{"draining", from, from.Add(l.drained)}
	case state == supervisor.GenExited:
		return segment{"draining", from, from}
	}
	return segment{"draining", from, now}
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
