package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/baton-proxy/baton/supervisor"
)

// printStatus writes st as tables for people.
func printStatus(out io.Writer, st *supervisor.Status, now time.Time) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	state := "running"
	if st.Stopping {
		state = "stopping"
	}
	fmt.Fprintf(w, "baton %s, pid %d, %s, up %s, active generation %d\n\n",
		st.Version, st.PID, state, now.Sub(st.StartedAt).Round(time.Second), st.ActiveGeneration)
	if c := st.Canary; c != nil {
		fmt.Fprintf(w, "CANARY\tSHARE\tSTEERING\tUP\tREQUESTS\tFAILED\tACTIVE REQUESTS\tACTIVE FAILED\tVERDICT\n")
		verdict := "baton promote / baton abort"
		if c.AutoVerdictInMs != nil {
			verdict = fmt.Sprintf("auto in %s (after %d requests, abort above %g× the active's failure rate)",
				(time.Duration(*c.AutoVerdictInMs) * time.Millisecond).Round(time.Second), c.MinRequests, c.MaxErrorRatio)
		}
		fmt.Fprintf(w, "%d beside %d\t%.0f%%\t%s\t%s\t%d\t%d (%s)\t%d\t%d (%s)\t%s\n\n", c.Generation, c.ActiveGeneration, c.Share, c.Steering,
			now.Sub(c.StartedAt).Round(time.Second), c.Requests, c.Failures, percentOf(c.Failures, c.Requests),
			c.ActiveRequests, c.ActiveFailures, percentOf(c.ActiveFailures, c.ActiveRequests), verdict)
	}

	if st.RoutingVersion > 0 {
		applied := "applied by every ready worker"
		if behind := st.RoutingBehind(); len(behind) > 0 {
			var ws []string
			for _, b := range behind {
				ws = append(ws, fmt.Sprintf("generation %d slot %d (pid %d) has %d", b.Generation, b.Worker.Slot, b.Worker.PID, b.Worker.RoutingVersion))
			}
			applied = "not applied yet: " + strings.Join(ws, ", ")
		}
		fmt.Fprintf(w, "routing %d (Gateway API, Ingress): %s\n", st.RoutingVersion, applied)
		for _, p := range st.RoutingInPart() {
			fmt.Fprintf(w, "  applied in part by generation %d slot %d (pid %d): %s\n", p.Generation, p.Worker.Slot, p.Worker.PID, p.Worker.RoutingError)
		}
		fmt.Fprintln(w)
	}

	fmt.Fprintln(w, "LISTENER\tADDRESS\tPROTOCOL\tSOCKETS\tREUSEPORT\tACCEPT QUEUE")
	for _, l := range st.Listeners {
		q := "-"
		if len(l.AcceptQueue) > 0 {
			parts := make([]string, len(l.AcceptQueue))
			for i, n := range l.AcceptQueue {
				parts[i] = strconv.Itoa(n)
			}
			q = strings.Join(parts, ",") + " / " + strconv.Itoa(l.Backlog)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%t\t%s\n", l.Name, l.Address, l.Protocol, l.Sockets, l.ReusePort, q)
	}

	if len(st.Backends) > 0 {
		fmt.Fprintln(w, "\nBACKEND\tMODE\tREADY\tTERMINATING\tSERVING\tUPDATED\tERROR")
		for _, b := range st.Backends {
			updated := "-"
			if !b.UpdatedAt.IsZero() {
				updated = b.UpdatedAt.Local().Format("15:04:05.000")
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%s\t%s\n", b.Name, b.Mode, b.Ready, b.Terminating, b.Serving, updated, b.Error)
		}
	}

	fmt.Fprintln(w, "\nGENERATION\tSTATE\tSLOT\tPID\tWORKER\tUP\tRESTARTS\tCONNS\tREQUESTS")
	for i := len(st.Generations) - 1; i >= 0; i-- {
		g := st.Generations[i]
		if g.State == supervisor.GenExited || g.State == supervisor.GenFailed {
			if len(st.Generations)-i > 5 {
				continue // only the recent finished ones
			}
		}
		for j, wk := range g.Workers {
			id, gs := "", ""
			if j == 0 {
				id, gs = strconv.FormatUint(g.ID, 10), g.State.String()
			}
			up := "-"
			if wk.State == supervisor.WorkerReady || wk.State == supervisor.WorkerDraining || wk.State == supervisor.WorkerStarting {
				up = now.Sub(wk.StartedAt).Round(time.Second).String()
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%s\t%d\t%d\t%d\n", id, gs, wk.Slot, wk.PID, wk.State, up, wk.Restarts, wk.Connections, wk.Requests)
		}
		if g.Reason != "" {
			fmt.Fprintf(w, "\t\treason: %s\n", g.Reason)
		}
		if g.DrainReason != "" && g.State == supervisor.GenDraining {
			fmt.Fprintf(w, "\t\tdraining: %s\n", g.DrainReason)
		}
	}

	fmt.Fprintln(w, "\nHANDOFF\tWHEN\tTRIGGER\tFROM\tTO\tOUTCOME\tSPAWN\tREADY\tDRAIN\tREASON")
	hs := st.Handoffs
	if len(hs) > 10 {
		hs = hs[len(hs)-10:]
	}
	if st.PendingHandoff != nil {
		hs = append(hs, *st.PendingHandoff)
	}
	for _, h := range hs {
		drain := "-"
		if h.DrainMs != nil {
			drain = fmt.Sprintf("%dms", *h.DrainMs)
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%d\t%s\t%dms\t%dms\t%s\t%s\n", h.ID, h.StartedAt.Local().Format("15:04:05"), h.Trigger, h.From, h.To, h.Outcome, h.SpawnMs, h.ReadyMs, drain, h.Reason)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	printTimeline(out, st, now)
	return nil
}

// percentOf formats n of total as a percent.
func percentOf(n, total uint64) string {
	if total == 0 {
		return "-"
	}
	return strconv.FormatFloat(100*float64(n)/float64(total), 'f', 2, 64) + "%"
}
