package e2e_test

import (
	"strings"
	"testing"
	"time"
)

// The figure docs/design.md section 10 sets: from the hang to traffic restored
// within the engine's load time plus a minute.
const restoreBudget = engineLoadWall + 60*time.Second

// TestHungEngineUnderLoadIsDrainedRestartedOnceAndRestoredGradually is the
// whole story of docs/design.md section 5 on real parts: an engine hangs under
// load behind HAProxy; vigil calls it hung, drains it at HAProxy, restarts
// its container once, waits through the load time, brings it back through
// the weight ramp, and the same load succeeds again.
func TestHungEngineUnderLoadIsDrainedRestartedOnceAndRestoredGradually(t *testing.T) {
	skipShort(t)
	t.Parallel()
	r := newRig(t, "e2e-hang")
	v := startVigil(t, r.vigilConfig(t))
	m := startMonitor(t, r.h, v.StatusURL)
	l := startLoad(t, r.h.URL(), 4, 200, 3*time.Second)

	m.waitFor(t, 20*time.Second, "vigil call the loaded engine healthy", time.Time{}, func(o obs) bool { return o.Verdict == "healthy" })
	r.eng.waitPastGrace(t)
	before := r.eng.startedAt(t)
	warm := time.Now()
	time.Sleep(time.Second)
	if ok, failed := l.Tally(warm, time.Now()); ok == 0 || len(failed) > 0 {
		t.Fatalf("load through HAProxy before the hang: %d ok, %d failed %v", ok, len(failed), failed)
	}

	hangAt := time.Now()
	r.eng.hang(t)
	hung := m.waitFor(t, 15*time.Second, "the verdict hung", hangAt, func(o obs) bool { return o.Verdict == "hung" })
	drain := m.waitFor(t, 15*time.Second, "HAProxy report the server DRAIN", hangAt, obs.drain)
	restored := m.waitFor(t, restoreBudget, "HAProxy report the server UP at weight 100% after the drain", drain.At, obs.upFull)
	took := restored.At.Sub(hangAt)
	t.Logf("hang at %s; verdict hung after %s; DRAIN after %s; traffic restored (UP, weight 100%%) after %s (budget: load time %s + 60s)",
		hangAt.Format("15:04:05.000"), hung.At.Sub(hangAt).Round(time.Millisecond), drain.At.Sub(hangAt).Round(time.Millisecond),
		took.Round(time.Millisecond), engineLoadWall)
	if hung.At.After(drain.At) {
		t.Errorf("HAProxy drained at %s, before vigil called the engine hung at %s", drain.At.Format("15:04:05.000"), hung.At.Format("15:04:05.000"))
	}
	if took > restoreBudget {
		t.Errorf("traffic restored %s after the hang, want at most %s", took, restoreBudget)
	}

	// The ramp: back at 10%, then 50%, then 100%, in that order.
	var ramp []string
	for _, o := range m.all(drain.At, func(o obs) bool { return o.HAStatus == "UP" }) {
		if o.At.After(restored.At) {
			break
		}
		if len(ramp) == 0 || ramp[len(ramp)-1] != o.HAWeight {
			ramp = append(ramp, o.HAWeight)
		}
	}
	if got := strings.Join(ramp, " → "); got != "10 → 50 → 100" {
		t.Errorf("HAProxy weights while UP after the drain: %s, want 10 → 50 → 100", got)
	}

	// The same load succeeds again, and the engine is not restarted again.
	time.Sleep(3 * time.Second)
	ok, failed := l.Tally(restored.At, time.Now())
	if ok < 10 || len(failed) > 0 {
		t.Errorf("load through HAProxy after the restore: %d ok, %d failed %v; want every request answered 200", ok, len(failed), failed)
	}
	after := r.eng.startedAt(t)
	if after == before {
		t.Fatalf("container StartedAt still %s: vigil never restarted it", before)
	}
	time.Sleep(3 * time.Second)
	if again := r.eng.startedAt(t); again != after {
		t.Errorf("container StartedAt changed again after the recovery: %s, then %s", after, again)
	}
	if n := r.eng.starts(t, hangAt, time.Now()); n != 1 {
		t.Errorf("container started %d times since the hang, want exactly 1", n)
	}
	doc := v.mustStatus(t)
	if doc.Recovery.Step != "resolved" || doc.Recovery.Drained || doc.Recovery.RestartsInWindow != 1 {
		t.Errorf("vigil's recovery after the restore: step %q, drained %t, %d restarts in the window; want resolved, false, 1",
			doc.Recovery.Step, doc.Recovery.Drained, doc.Recovery.RestartsInWindow)
	}
	if doc.Incident != nil && doc.Incident.Resolved.IsZero() {
		t.Errorf("incident %s still open (%s) after the recovery", doc.Incident.ID, doc.Incident.State)
	}
}

// TestSaturatedEngineIsNeverDrainedNorRestarted overloads the same setup
// for many hang_afters: the counters keep moving under a deep queue, so
// vigil says saturated and pages, and never touches HAProxy or Docker.
func TestSaturatedEngineIsNeverDrainedNorRestarted(t *testing.T) {
	skipShort(t)
	t.Parallel()
	const stretch = 12 * time.Second // six hang_afters
	r := newRig(t, "e2e-saturated", "-max-num-seqs", "2")
	testStart := time.Now()
	v := startVigil(t, r.vigilConfig(t))
	m := startMonitor(t, r.h, v.StatusURL)
	before := r.eng.startedAt(t)
	l := startLoad(t, r.h.URL(), 24, 100, 20*time.Second)

	sat := m.waitFor(t, 20*time.Second, "the verdict saturated", time.Time{}, func(o obs) bool { return o.Verdict == "saturated" })
	time.Sleep(stretch)
	end := time.Now()

	if share := m.share(sat.At, end, func(o obs) bool { return o.Verdict == "saturated" }); share < 0.8 {
		t.Errorf("the verdict was saturated for %.0f%% of the %s overload, want at least 80%%", share*100, end.Sub(sat.At).Round(time.Second))
	}
	if bad := m.all(time.Time{}, func(o obs) bool {
		return o.drain() || strings.HasPrefix(o.HAStatus, "MAINT") || (o.HAWeight != "" && o.HAWeight != "100") ||
			o.Verdict == "hung" || o.Verdict == "down" || o.Drained || o.RecoveryActive || o.Step != ""
	}); len(bad) > 0 {
		t.Errorf("saturation led to a drain, a weight change or a recovery, first: %s", bad[0])
	}
	if ok, _ := l.Tally(sat.At, end); ok == 0 {
		t.Errorf("no request through HAProxy completed during the overload")
	}
	if after := r.eng.startedAt(t); after != before {
		t.Errorf("container StartedAt changed from %s to %s: a saturated engine was restarted", before, after)
	}
	if n := r.eng.starts(t, testStart, time.Now()); n != 0 {
		t.Errorf("container started %d times during the overload, want 0", n)
	}
	doc := v.mustStatus(t)
	if doc.Verdict.State != "saturated" || doc.Incident == nil || doc.Incident.Peak != "saturated" {
		t.Errorf("vigil at the end of the overload: verdict %q (%s), incident %+v; want saturated with a saturated incident",
			doc.Verdict.State, doc.Verdict.Reason, doc.Incident)
	}
	if doc.Recovery.RestartsInWindow != 0 || !doc.Recovery.LastRestart.IsZero() {
		t.Errorf("vigil's recovery shows %d restarts (last %s), want none", doc.Recovery.RestartsInWindow, doc.Recovery.LastRestart)
	}
	t.Logf("saturated from %s; %s", sat.At.Format("15:04:05.000"), doc.Verdict.Reason)
}

// TestVigilKilledAfterTheDrainResumesAndRestartsOnce kills vigil with
// SIGKILL the moment HAProxy shows the drain, and starts it again on the
// same config and state file: the new vigil finds the journal, finishes
// the recovery, restarts the container exactly once and puts the server
// back at 100%.
func TestVigilKilledAfterTheDrainResumesAndRestartsOnce(t *testing.T) {
	skipShort(t)
	t.Parallel()
	r := newRig(t, "e2e-sigkill")
	cfg := r.vigilConfig(t)
	// A longer drain wait keeps the kill well inside the drain.
	cfg.DrainTimeoutHung = 3 * time.Second
	v := startVigil(t, cfg)
	m := startMonitor(t, r.h, v.StatusURL)
	l := startLoad(t, r.h.URL(), 4, 200, 3*time.Second)

	m.waitFor(t, 20*time.Second, "vigil call the loaded engine healthy", time.Time{}, func(o obs) bool { return o.Verdict == "healthy" })
	r.eng.waitPastGrace(t)
	before := r.eng.startedAt(t)

	hangAt := time.Now()
	r.eng.hang(t)
	drain := m.waitFor(t, 15*time.Second, "HAProxy report the server DRAIN", hangAt, obs.drain)
	v.Kill(t)
	killedAt := time.Now()
	t.Logf("DRAIN seen %s after the hang; vigil killed %s after that", drain.At.Sub(hangAt).Round(time.Millisecond), killedAt.Sub(drain.At).Round(time.Millisecond))

	step, drained := v.journal(t)
	if (step != "drain" && step != "drain_wait") || !drained {
		t.Fatalf("journal when vigil was killed: step %q, drained %t; want drain or drain_wait, drained", step, drained)
	}
	if st, _, err := haproxyServer(r.h, serverName); err != nil || !strings.HasPrefix(st, "DRAIN") {
		t.Fatalf("HAProxy with vigil dead: %q, %v; want the server still DRAIN", st, err)
	}
	if now := r.eng.startedAt(t); now != before {
		t.Fatalf("container restarted (StartedAt %s, was %s) before vigil was killed; the kill came too late", now, before)
	}

	v.Start(t)
	restored := m.waitFor(t, restoreBudget, "HAProxy report the server UP at weight 100% after vigil's restart", killedAt, obs.upFull)
	t.Logf("traffic restored %s after the hang, %s after vigil was killed", restored.At.Sub(hangAt).Round(time.Millisecond),
		restored.At.Sub(killedAt).Round(time.Millisecond))
	if !strings.Contains(v.Logs.String(), "resuming an unfinished recovery from the journal") {
		t.Errorf("the second vigil did not say it resumed the journal's recovery")
	}

	time.Sleep(3 * time.Second)
	if ok, failed := l.Tally(restored.At, time.Now()); ok < 10 || len(failed) > 0 {
		t.Errorf("load through HAProxy after the restore: %d ok, %d failed %v; want every request answered 200", ok, len(failed), failed)
	}
	after := r.eng.startedAt(t)
	if after == before {
		t.Fatalf("container StartedAt still %s: the recovery never restarted it", before)
	}
	time.Sleep(2 * time.Second)
	if again := r.eng.startedAt(t); again != after {
		t.Errorf("container StartedAt changed again after the recovery: %s, then %s", after, again)
	}
	if n := r.eng.starts(t, hangAt, time.Now()); n != 1 {
		t.Errorf("container started %d times since the hang across both vigils, want exactly 1", n)
	}
	if st, w, err := haproxyServer(r.h, serverName); err != nil || st != "UP" || w != "100" {
		t.Errorf("HAProxy at the end: %q weight %s (%v), want UP at 100", st, w, err)
	}
	doc := v.mustStatus(t)
	if doc.Recovery.Step != "resolved" || doc.Recovery.Drained || len(doc.Recovery.Journal.History) != 1 {
		t.Errorf("vigil's recovery at the end: step %q, drained %t, restart history %v; want resolved, false, one restart",
			doc.Recovery.Step, doc.Recovery.Drained, doc.Recovery.Journal.History)
	}
}
