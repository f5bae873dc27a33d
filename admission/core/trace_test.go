package core

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// TestTheControlStepsAreTraced: every window the law closes is one Step,
// saying what cut, grew or held the cap, through an engine restart too;
// a logger at trace level logs them, any other level costs nothing.
func TestTheControlStepsAreTraced(t *testing.T) {
	var steps []Step
	a := newAutoLimit(autoObjective, 0, time.Unix(1000, 0))
	a.TraceSteps(func(s Step) { steps = append(steps, s) })
	now := time.Unix(1000, 0)
	for i := range 8 {
		now = now.Add(300 * time.Millisecond)
		a.markDemand()
		waiting := 0.0
		if i == 6 {
			waiting = 10 // the engine queues: the cap is cut to what runs
		}
		a.observeEngine(waiting, 12, now)
	}
	a.Restart(now)
	now = now.Add(2 * time.Second)
	a.observeEngine(0, 12, now)
	a.observeEngine(0, 12, now.Add(300*time.Millisecond))
	var whys []string
	for _, s := range steps {
		whys = append(whys, s.Why)
	}
	all := strings.Join(whys, ", ")
	for _, want := range []string{"held: no answers", "cut: queued"} {
		if !strings.Contains(all, want) {
			t.Errorf("steps %q, want one %q", all, want)
		}
	}
	if last := steps[len(steps)-1]; !last.At.Equal(now) {
		t.Errorf("the last step at %v, want one after the restart, at %v", last.At, now)
	}

	for _, tc := range []struct {
		level logrus.Level
		want  bool
	}{{logrus.TraceLevel, true}, {logrus.DebugLevel, false}} {
		var buf bytes.Buffer
		lg := logrus.New()
		lg.SetOutput(&buf)
		lg.SetLevel(tc.level)
		a := newAutoLimit(autoObjective, 0, time.Unix(1000, 0))
		traceSteps(a, logrus.NewEntry(lg))
		if (a.trace != nil) != tc.want {
			t.Errorf("at level %v traced: %v, want %v", tc.level, a.trace != nil, tc.want)
			continue
		}
		a.observeEngine(0, 1, time.Unix(1001, 0))
		a.observeEngine(0, 1, time.Unix(1002, 0))
		if got := strings.Contains(buf.String(), `msg="admission: control step"`); got != tc.want {
			t.Errorf("at level %v logged a step: %v, want %v: %s", tc.level, got, tc.want, buf.String())
		}
	}
}
