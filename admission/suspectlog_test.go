package admission

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// Two stalls that pass within a minute are one episode of suspicions: one
// warning, with the evidence of the first (the silence, the threshold,
// the overdue call), where before each raise was a warning (about 200 in
// 20 s on bench/goodput's slow20); /stats counts both.
func TestSuspicionsOfOneEpisodeAreLoggedOnce(t *testing.T) {
	t.Parallel()
	re := newRestartableEngine(t, 0)
	lg, hook := logtest.NewNullLogger()
	p := startProxy(t, testConfig(), re.url, WithLogger(logrus.NewEntry(lg)))
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	streamDone := startLongStream(ctx, t, c, p.url, re)
	for range 2 {
		e := re.cur.Load()
		e.Hang()
		eventually(t, 5*time.Second, "the stall suspected", p.l.Suspected)
		e.Clear()
		eventually(t, 3*time.Second, "the suspicion cleared", func() bool { return !p.l.Suspected() })
	}
	streamDone()
	var warned []*logrus.Entry
	for _, en := range hook.AllEntries() {
		if en.Level == logrus.WarnLevel && strings.Contains(en.Message, "suspected stalled") {
			warned = append(warned, en)
		}
	}
	if s := p.l.Stats(); s.Suspicions != 2 || s.FalseSuspicions != 2 {
		t.Errorf("suspicions %d (false %d), want 2 (2)", s.Suspicions, s.FalseSuspicions)
	}
	if len(warned) != 1 {
		t.Fatalf("%d warnings of a suspicion, want 1 for the episode", len(warned))
	}
	for _, k := range []string{"silence", "threshold", "overdue", "waited", "vigil_paused"} {
		if _, ok := warned[0].Data[k]; !ok {
			t.Errorf("the warning has no %q: %v", k, warned[0].Data)
		}
	}
}
