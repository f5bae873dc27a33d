package e2e_test

import (
	"strings"
	"testing"
	"time"
)

// Issue #12 end to end: vigil run, a real HAProxy and a real container.
// One hung data-parallel rank behind a moving sum is drained and
// restarted exactly once; an engine whose /v1/models answers 503 while it
// serves is never drained nor restarted.

func TestOneHungDataParallelRankIsDrainedAndRestartedOnce(t *testing.T) {
	skipShort(t)
	t.Parallel()
	r := newRig(t, "e2e-rank", "-data-parallel", "2")
	v := startVigil(t, r.vigilConfig(t))
	m := startMonitor(t, r.h, v.StatusURL)
	startLoad(t, r.h.URL(), 8, 200, 3*time.Second)

	m.waitFor(t, 20*time.Second, "vigil call the loaded engine healthy", time.Time{}, func(o obs) bool { return o.Verdict == "healthy" })
	r.eng.waitPastGrace(t)
	before := r.eng.startedAt(t)

	hangAt := time.Now()
	r.eng.fault(t, "/fault/hang?rank=1", "hang-rank-1")
	hung := m.waitFor(t, 15*time.Second, "the verdict hung", hangAt, func(o obs) bool { return o.Verdict == "hung" })
	drain := m.waitFor(t, 15*time.Second, "HAProxy report the server DRAIN", hangAt, obs.drain)
	restored := m.waitFor(t, restoreBudget, "HAProxy report the server UP at weight 100% after the drain", drain.At, obs.upFull)
	t.Logf("rank 1 hung at %s; verdict hung after %s (%s); DRAIN after %s; restored after %s",
		hangAt.Format("15:04:05.000"), hung.At.Sub(hangAt).Round(time.Millisecond), hung.Reason,
		drain.At.Sub(hangAt).Round(time.Millisecond), restored.At.Sub(hangAt).Round(time.Millisecond))
	if !strings.Contains(hung.Reason, "rank 1 of 2") {
		t.Errorf("the hung verdict does not name the rank: %s", hung.Reason)
	}
	if after := r.eng.startedAt(t); after == before {
		t.Fatalf("container StartedAt still %s: vigil never restarted it", before)
	}
	time.Sleep(2 * time.Second)
	if n := r.eng.starts(t, hangAt, time.Now()); n != 1 {
		t.Errorf("container started %d times since the hang, want exactly 1", n)
	}
}

func TestModels503OnAServingEngineIsNeverDrainedNorRestarted(t *testing.T) {
	skipShort(t)
	t.Parallel()
	r := newRig(t, "e2e-models503")
	testStart := time.Now()
	v := startVigil(t, r.vigilConfig(t))
	m := startMonitor(t, r.h, v.StatusURL)
	l := startLoad(t, r.h.URL(), 4, 100, 3*time.Second)
	m.waitFor(t, 20*time.Second, "vigil call the loaded engine healthy", time.Time{}, func(o obs) bool { return o.Verdict == "healthy" })
	r.eng.waitPastGrace(t)
	before := r.eng.startedAt(t)

	faultAt := time.Now()
	r.eng.fault(t, "/fault/error?endpoint=/v1/models&code=503", "error /v1/models 503")
	time.Sleep(8 * time.Second) // four hang_afters, many down_afters
	if bad := m.all(faultAt, func(o obs) bool {
		return o.drain() || strings.HasPrefix(o.HAStatus, "MAINT") || o.Verdict == "hung" || o.Verdict == "down" || o.Drained || o.RecoveryActive
	}); len(bad) > 0 {
		t.Errorf("a serving engine with /v1/models 503 was drained or judged down, first: %s", bad[0])
	}
	if ok, _ := l.Tally(faultAt, time.Now()); ok == 0 {
		t.Errorf("no request through HAProxy completed while /v1/models answered 503")
	}
	if after := r.eng.startedAt(t); after != before {
		t.Errorf("container StartedAt changed from %s to %s: a serving engine was restarted", before, after)
	}
	if n := r.eng.starts(t, testStart, time.Now()); n > 1 {
		t.Errorf("container started %d times, want only its first start", n)
	}
	doc := v.mustStatus(t)
	if !strings.Contains(doc.Verdict.Reason, "odd: /v1/models answers 503") {
		t.Errorf("vigil does not say what is odd: %s %s", doc.Verdict.State, doc.Verdict.Reason)
	}
}
