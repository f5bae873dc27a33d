package alerts

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/watchdog"
)

// obs is one watchdog cycle as the pager sees it.
type obs struct {
	state    watchdog.State
	incident string // "" = no incident
	resolved bool
	waiting  float64
	// recovering: vigil's own recovery is under way (Verdict.Recovering).
	recovering bool
	n          int           // repeat this many cycles (default 1)
	every      time.Duration // cycle length (default 15s)
}

// play feeds a sequence of cycles to the policy and names the pages it
// asks for, e.g. "head", "change saturated→hung", "update", "resolve".
func play(p policy, seq []obs) []string {
	var (
		t   thread
		out []string
		now = t0
	)
	for _, o := range seq {
		n, every := max(o.n, 1), o.every
		if every == 0 {
			every = 15 * time.Second
		}
		for range n {
			v := saturated(now, o.waiting)
			v.State, v.Recovering = o.state, o.recovering
			var inc *watchdog.Incident
			if o.incident != "" {
				inc = &watchdog.Incident{ID: o.incident, Opened: t0, State: o.state}
				if o.resolved {
					inc.Resolved = now
				}
			}
			var ds []decision
			t, ds = p.observe(t, v, inc, now)
			for _, d := range ds {
				switch {
				case d.Kind == KindChange && d.Again:
					out = append(out, fmt.Sprintf("%s again", d.From))
				case d.Kind == KindChange:
					out = append(out, fmt.Sprintf("change %s→%s", d.From, o.state))
				default:
					out = append(out, string(d.Kind))
				}
			}
			now = now.Add(every)
		}
	}
	return out
}

func TestPagingPolicy(t *testing.T) {
	const (
		sat     = watchdog.StateSaturated
		hungS   = watchdog.StateHung
		down    = watchdog.StateDown
		ok      = watchdog.StateHealthy
		load    = watchdog.StateLoading
		unknown = watchdog.StateUnknown
		misconf = watchdog.StateMisconfigured
	)
	p := policy{UpdateEvery: 10 * time.Minute, UnknownAfter: 5 * time.Minute}
	cases := []struct {
		name string
		seq  []obs
		want []string
	}{
		{"no incident pages nothing, whatever the state",
			[]obs{{state: ok, n: 10}, {state: sat, waiting: 99, n: 3}, {state: unknown, n: 3}},
			nil},
		{"saturated for an hour with a steady queue pages one head and nothing else",
			[]obs{{state: sat, incident: "a", waiting: 99, n: 240}},
			[]string{"head"}},
		{"saturated for an hour with a queue that keeps doubling updates at most every ten minutes",
			[]obs{
				{state: sat, incident: "a", waiting: 10, n: 40}, {state: sat, incident: "a", waiting: 20, n: 40},
				{state: sat, incident: "a", waiting: 40, n: 40}, {state: sat, incident: "a", waiting: 80, n: 40},
				{state: sat, incident: "a", waiting: 160, n: 40}, {state: sat, incident: "a", waiting: 320, n: 40},
			},
			[]string{"head", "update", "update", "update", "update", "update"}},
		{"a queue that changes every cycle still updates no more than every ten minutes",
			[]obs{{state: sat, incident: "a", waiting: 10, n: 4}, {state: sat, incident: "a", waiting: 1000, n: 4}, {state: sat, incident: "a", waiting: 10, n: 4}},
			[]string{"head"}},
		{"hung, recovered and resolved pages a head and a resolve",
			[]obs{{state: hungS, incident: "h", waiting: 40, n: 3}, {state: load, incident: "h", n: 20}, {state: ok, incident: "h", n: 2}, {state: ok, incident: "h", resolved: true}},
			[]string{"head", "resolve"}},
		{"hung for an hour with frozen gauges sends no updates",
			[]obs{{state: hungS, incident: "h", waiting: 40, n: 240}},
			[]string{"head"}},
		{"saturated turning hung pages the change at once",
			[]obs{{state: sat, incident: "a", waiting: 99, n: 3}, {state: hungS, incident: "a", waiting: 99}},
			[]string{"head", "change saturated→hung"}},
		{"vigil's own restart of a hung engine (down, then loading, while recovering) is no new failure",
			[]obs{{state: hungS, incident: "h", waiting: 40, n: 2}, {state: down, incident: "h", recovering: true, n: 3},
				{state: load, incident: "h", recovering: true, n: 4}, {state: ok, incident: "h", n: 2}, {state: ok, incident: "h", resolved: true}},
			[]string{"head", "resolve"}},
		{"hung again after the restart is paged as a relapse",
			[]obs{{state: hungS, incident: "h", waiting: 40, n: 2}, {state: load, incident: "h", n: 4}, {state: hungS, incident: "h", waiting: 40, n: 2}},
			[]string{"head", "hung again"}},
		{"saturation back after a healthy blip is the same saturation",
			[]obs{{state: sat, incident: "a", waiting: 99, n: 2}, {state: ok, incident: "a"}, {state: sat, incident: "a", waiting: 99, n: 2}, {state: ok, incident: "a"}, {state: sat, incident: "a", waiting: 99}},
			[]string{"head"}},
		{"a scrape blip to unknown inside an incident stays quiet",
			[]obs{{state: sat, incident: "a", waiting: 99, n: 2}, {state: unknown, incident: "a", n: 2}, {state: sat, incident: "a", waiting: 99}},
			[]string{"head"}},
		{"unknown that lasts five minutes inside an incident pages a change",
			[]obs{{state: sat, incident: "a", waiting: 99}, {state: unknown, incident: "a", n: 22}},
			[]string{"head", "change saturated→unknown"}},
		{"unreadable scrapes every other cycle inside an incident never page unknown",
			slices.Repeat([]obs{{state: sat, incident: "a", waiting: 99}, {state: unknown, incident: "a"}}, 40),
			[]string{"head"}},
		{"unknown four minutes at a time, between readable scrapes, never pages",
			slices.Repeat([]obs{{state: hungS, incident: "h", waiting: 40}, {state: unknown, incident: "h", n: 16}}, 4),
			[]string{"head"}},
		{"an incident the watchdog opens as unknown pages at once",
			[]obs{{state: unknown}, {state: unknown, incident: "u", n: 3}},
			[]string{"head"}},
		{"loading at the start of an incident waits for a state worth paging",
			[]obs{{state: load, incident: "d", n: 3}, {state: down, incident: "d", n: 2}},
			[]string{"head"}},
		{"misconfigured pages once and never again while it lasts",
			[]obs{{state: misconf, incident: "m", n: 480}},
			[]string{"head"}},
		{"an incident resolved before it paged resolves quietly",
			[]obs{{state: load, incident: "q", n: 2}, {state: ok, incident: "q", resolved: true}},
			nil},
		{"a resolve is sent once however often the resolved incident is seen",
			[]obs{{state: sat, incident: "a", waiting: 99}, {state: ok, incident: "a", resolved: true, n: 3}, {state: ok, n: 3}},
			[]string{"head", "resolve"}},
		{"a new incident gets a new head",
			[]obs{{state: sat, incident: "a", waiting: 99}, {state: ok, incident: "a", resolved: true}, {state: ok, n: 4}, {state: sat, incident: "b", waiting: 99, n: 2}},
			[]string{"head", "resolve", "head"}},
		{"an incident the watchdog drops while healthy still gets its resolve",
			[]obs{{state: sat, incident: "a", waiting: 99, n: 2}, {state: ok, n: 2}},
			[]string{"head", "resolve"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := play(p, tc.seq); !slices.Equal(got, tc.want) {
				t.Errorf("pages = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRefusedGuardPagesOncePerReason(t *testing.T) {
	p := policy{UpdateEvery: 10 * time.Minute}
	th := thread{Incident: "h"}
	var paged []string
	for i, s := range []recovery.Step{
		{Incident: "h", Name: recovery.StepGuardRefused, Detail: "cooldown: last restart 12m ago"},
		{Incident: "h", Name: recovery.StepGuardRefused, Detail: "cooldown: last restart 13m ago"}, // same reason, a minute on
		{Incident: "h", Name: recovery.StepGuardRefused, Detail: "restart budget spent: 3 in 6h"},
		{Incident: "h", Name: recovery.StepGuardRefused, Detail: "cooldown: last restart 14m ago"},
		{Incident: "h", Name: recovery.StepDrain, OK: true},
		{Incident: "h", Name: recovery.StepDrain, OK: true}, // every other step pages, repeats included
	} {
		var ok bool
		th, ok = p.step(th, s)
		if ok {
			paged = append(paged, fmt.Sprintf("%d:%s", i, s.Name))
		}
	}
	want := []string{"0:guard_refused", "2:guard_refused", "4:drain", "5:drain"}
	if !slices.Equal(paged, want) {
		t.Errorf("paged %v, want %v", paged, want)
	}
}

func TestFingerprintIgnoresTimingsButNotOutcomes(t *testing.T) {
	a, b := hung(t0), hung(t0.Add(time.Minute))
	b.Evidence.SinceProgress += time.Minute
	b.Evidence.Probe = "outstanding for 2m35s"
	b.Evidence.Models = "200 in 9ms"
	if fingerprint(a) != fingerprint(b) {
		t.Errorf("a hang a minute older is not news:\n%s\n%s", fingerprint(a), fingerprint(b))
	}
	b.Evidence.Models = "503 in 9ms"
	if fingerprint(a) == fingerprint(b) {
		t.Error("/v1/models turning 503 is news")
	}
	if !strings.HasPrefix(fingerprint(a), "hung|") {
		t.Errorf("fingerprint = %s", fingerprint(a))
	}
}
