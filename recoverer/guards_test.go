package recoverer

import (
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/recovery"
)

func TestTimeGuards(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	limits := guardLimits{grace: 10 * time.Minute, cooldown: 30 * time.Minute, budget: 3, window: 6 * time.Hour}
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	cases := []struct {
		name          string
		engineStarted time.Time
		history       []time.Time
		dry           []time.Time // a dry run's would-be restarts
		limits        guardLimits
		want          recovery.Guard // "" = allowed
		until         time.Time
		reasonHas     string
	}{
		{name: "with no restart history and an old engine every guard passes",
			engineStarted: ago(48 * time.Hour)},
		{name: "an engine that started five minutes ago is still in its startup grace",
			engineStarted: ago(5 * time.Minute), want: recovery.GuardStartupGrace, until: now.Add(5 * time.Minute), reasonHas: "may still be loading"},
		{name: "an engine that started an hour ago is past its grace",
			engineStarted: ago(time.Hour)},
		{name: "an unknown engine start time skips the grace check",
			engineStarted: time.Time{}},
		{name: "a zero startup grace never refuses",
			engineStarted: ago(time.Second), limits: guardLimits{cooldown: 30 * time.Minute, budget: 3, window: 6 * time.Hour}},
		{name: "an engine vigil restarted twenty minutes ago is in cooldown",
			engineStarted: ago(20 * time.Minute), history: []time.Time{ago(20 * time.Minute)},
			want: recovery.GuardCooldown, until: now.Add(10 * time.Minute), reasonHas: "cooldown of 30m lifts"},
		{name: "a restart thirty-one minutes ago no longer holds the cooldown",
			engineStarted: ago(31 * time.Minute), history: []time.Time{ago(31 * time.Minute)}},
		{name: "vigil's own restart five minutes ago counts as a start for the grace even if the engine's start is unknown",
			history: []time.Time{ago(5 * time.Minute)}, want: recovery.GuardStartupGrace, until: now.Add(5 * time.Minute)},
		{name: "three restarts in six hours spend the budget until the oldest leaves the window",
			engineStarted: ago(time.Hour), history: []time.Time{ago(5 * time.Hour), ago(3 * time.Hour), ago(time.Hour)},
			want: recovery.GuardBudget, until: now.Add(time.Hour), reasonHas: "3 restarts in the last 6h (budget 3)"},
		{name: "the oldest restart leaving the window frees the budget",
			engineStarted: ago(time.Hour), history: []time.Time{ago(6*time.Hour + time.Minute), ago(3 * time.Hour), ago(time.Hour)}},
		{name: "two restarts in the window leave one in the budget",
			engineStarted: ago(2 * time.Hour), history: []time.Time{ago(4 * time.Hour), ago(2 * time.Hour)}},
		{name: "four restarts with a budget of three lift when two have left the window",
			engineStarted: ago(time.Hour), history: []time.Time{ago(5 * time.Hour), ago(4 * time.Hour), ago(3 * time.Hour), ago(time.Hour)},
			want: recovery.GuardBudget, until: now.Add(2 * time.Hour)},
		// #40: a dry run restarted nothing, so its would-be restart starts
		// no grace (the engine that served since is not loading); it
		// paces the dry run by the cooldown, said as a would-be restart.
		{name: "a dry run's would-be restart twenty seconds ago starts no grace; its cooldown says would",
			engineStarted: ago(48 * time.Hour), dry: []time.Time{ago(20 * time.Second)},
			want: recovery.GuardCooldown, until: now.Add(30*time.Minute - 20*time.Second), reasonHas: "dry run: vigil would have restarted the engine 20s ago"},
		{name: "with no cooldown, a would-be restart refuses nothing",
			engineStarted: ago(48 * time.Hour), dry: []time.Time{ago(20 * time.Second)},
			limits: guardLimits{grace: 10 * time.Minute, budget: 3, window: 6 * time.Hour}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := limits
			if c.limits != (guardLimits{}) {
				l = c.limits
			}
			got := timeGuards(now, c.engineStarted, c.history, c.dry, l)
			if c.want == "" {
				if got != nil {
					t.Fatalf("refused: %+v", got)
				}
				return
			}
			if got == nil || got.Guard != c.want {
				t.Fatalf("got %+v, want a %s refusal", got, c.want)
			}
			if !got.Until.Equal(c.until) {
				t.Errorf("until = %s, want %s", got.Until, c.until)
			}
			if !strings.Contains(got.Reason, c.reasonHas) {
				t.Errorf("reason %q lacks %q", got.Reason, c.reasonHas)
			}
		})
	}
}

func TestPoolLock(t *testing.T) {
	srv := func(name string, opts ...func(*balancer.ServerStatus)) balancer.ServerStatus {
		s := balancer.ServerStatus{Backend: "vllm", Server: name, Status: "UP"}
		for _, o := range opts {
			o(&s)
		}
		return s
	}
	drained := func(s *balancer.ServerStatus) { s.Drained, s.Status = true, "DRAIN" }
	maint := func(s *balancer.ServerStatus) { s.Maint, s.Status = true, "MAINT" }
	down := func(s *balancer.ServerStatus) { s.Status = "DOWN" }
	cases := []struct {
		name       string
		st         balancer.State
		selfOurs   bool
		afterDrain bool
		refused    bool
		reasonHas  string
	}{
		{name: "a pool where nobody is drained lets this host drain",
			st: balancer.State{Known: true, Self: srv("node2"), Others: []balancer.ServerStatus{srv("node1"), srv("node3")}}},
		{name: "another member drained blocks this host even if it sorts later",
			st: balancer.State{Known: true, Self: srv("node2"), Others: []balancer.ServerStatus{srv("node1"), srv("node3", drained)}}, refused: true, reasonHas: "node3 (drained"},
		{name: "another member in maintenance blocks this host",
			st: balancer.State{Known: true, Self: srv("node2"), Others: []balancer.ServerStatus{srv("node1", maint)}}, refused: true, reasonHas: "in maintenance"},
		{name: "a drained member whose checks fail (DOWN) still blocks this host",
			st: balancer.State{Known: true, Self: srv("node2"), Others: []balancer.ServerStatus{srv("node1", drained, down)}}, refused: true, reasonHas: "node1 (drained"},
		{name: "a member that is merely DOWN by its health check does not block",
			st: balancer.State{Known: true, Self: srv("node2"), Others: []balancer.ServerStatus{srv("node1", down)}}},
		{name: "this host drained by an operator is not vigil's to take over",
			st: balancer.State{Known: true, Self: srv("node2", drained)}, refused: true, reasonHas: "vigil did not do it"},
		{name: "this host drained by vigil itself (a resumed recovery) is fine",
			st: balancer.State{Known: true, Self: srv("node2", drained)}, selfOurs: true},
		{name: "after draining, a member drained at the same moment that sorts first makes this host back off",
			st: balancer.State{Known: true, Self: srv("node2", drained), Others: []balancer.ServerStatus{srv("node1", drained)}}, selfOurs: true, afterDrain: true,
			refused: true, reasonHas: "node2 backs off"},
		{name: "after draining, a member drained at the same moment that sorts later backs off instead",
			st: balancer.State{Known: true, Self: srv("node2", drained), Others: []balancer.ServerStatus{srv("node3", drained)}}, selfOurs: true, afterDrain: true},
		{name: "a load balancer vigil cannot read (an http hook) takes no lock",
			st: balancer.State{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := poolLock(c.st, c.selfOurs, c.afterDrain)
			if (got != nil) != c.refused {
				t.Fatalf("poolLock = %+v, want refused=%v", got, c.refused)
			}
			if got != nil && (got.Guard != recovery.GuardPoolLock || !strings.Contains(got.Reason, c.reasonHas)) {
				t.Fatalf("refusal %+v, want pool_lock with %q", got, c.reasonHas)
			}
		})
	}
}
