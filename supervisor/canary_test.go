package supervisor

import (
	"reflect"
	"testing"
)

// Without BPF a canary takes k of a group's N sockets: percent of N
// rounded, at least one and at least one left to the active generation.
func TestPlanSlots(t *testing.T) {
	for _, tc := range []struct {
		percent, sockets int
		canary           []int // the sockets the canary accepts on
		share            float64
	}{
		{10, 2, []int{1}, 50},
		{10, 4, []int{3}, 25},
		{50, 4, []int{2, 3}, 50},
		{90, 4, []int{1, 2, 3}, 75},
		{99, 2, []int{1}, 50},
	} {
		socks := make([]*socket, tc.sockets)
		g := &generation{plan: &plan{listeners: []plannedListener{{spec: ListenerSpec{Name: "web"}, sockets: socks, slots: true}}}}
		c := &canaryRun{percent: tc.percent}
		c.planSlots(g)
		if !reflect.DeepEqual(c.activePaused["web"], tc.canary) || c.share != tc.share {
			t.Errorf("%d%% of %d sockets: canary on %v (share %v), want %v (%v)", tc.percent, tc.sockets, c.activePaused["web"], c.share, tc.canary, tc.share)
		}
		if len(g.paused["web"])+len(c.activePaused["web"]) != tc.sockets {
			t.Errorf("%d%% of %d sockets: canary paused on %v, active on %v: not a split", tc.percent, tc.sockets, g.paused["web"], c.activePaused["web"])
		}
	}
}
