package core

import (
	"math"
	"testing"
	"time"
)

func TestEventRateFollowsTheEnginesPace(t *testing.T) {
	t0 := time.Unix(1000, 0)
	t.Parallel()
	cases := []struct {
		name  string
		every time.Duration // one event this often
		n     int           // events
		after time.Duration // now, after the last event
		since time.Duration // since, after the first event (0: none)
		want  float64
	}{
		// Many events in the span: the span's count over the span.
		{name: "a fast engine: the last ten seconds", every: 100 * time.Millisecond, n: 300, after: 0, want: 10},
		// An answer every 7 s (0.14/s): ten seconds hold one or two; the
		// last sixteen tell the pace.
		{name: "a slow engine: the last sixteen events", every: 7 * time.Second, n: 40, after: 0, want: 1.0 / 7},
		{name: "a slow engine gone quiet: the rate falls", every: 7 * time.Second, n: 40, after: 105 * time.Second, want: 15.0 / (15*7 + 105)},
		{name: "too few events to say more: the span's count", every: 7 * time.Second, n: 1, after: time.Second, want: 0.1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newEventRate()
			at := t0
			for i := range c.n {
				at = t0.Add(time.Duration(i) * c.every)
				r.add(at)
			}
			var since time.Time
			if c.since > 0 {
				since = t0.Add(c.since)
			}
			got := r.perSecond(at.Add(c.after), completionSpan, since)
			if math.Abs(got-c.want) > 0.02*c.want {
				t.Errorf("rate %.4f/s, want %.4f/s", got, c.want)
			}
		})
	}
}

// A busy period's rate is its own: events of the period before it (here a
// faster one) do not count.
func TestEventRateForgetsTheBusyPeriodBefore(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	r := newEventRate()
	for i := range 10 {
		r.add(t0.Add(time.Duration(i) * time.Second))
	}
	since := t0.Add(time.Minute)
	at := since
	for i := range 10 {
		at = since.Add(time.Duration(i) * 7 * time.Second)
		r.add(at)
	}
	if got, want := r.perSecond(at, completionSpan, since), 1.0/7; math.Abs(got-want) > 0.001 {
		t.Errorf("rate %.4f/s since the busy period began, want %.4f/s", got, want)
	}
	if got, want := r.perSecond(at, completionSpan, time.Time{}), 15.0/(60+63-4); math.Abs(got-want) > 0.001 {
		t.Errorf("rate %.4f/s over both periods, want %.4f/s", got, want)
	}
}
