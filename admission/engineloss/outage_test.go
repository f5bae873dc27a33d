package engineloss

import (
	"testing"
	"time"
)

// The hang window's fate keeps its moments, and a false suspicion after
// the recovery (the restarted engine ramping under the backlog) does not
// wipe the outage's count before the recovery's page reads it: in
// bench/hanglost a run's no-peer arm read "held 0, continued 0" for an
// outage that held 32 calls and continued 11.
func TestTheOutagesFateOutlivesAFalseSuspicionAfterIt(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var o Outage
	o.Open(at(1)) // the suspicion
	o.Note(func(f *Fate) { f.MovedTo["node2"]++ })
	if !o.Begin(at(3), at(0.5)) {
		t.Fatal("Begin: an outage already on")
	}
	o.Note(func(f *Fate) { f.Held++ })
	o.Released(40 * time.Second)
	o.End(at(45))

	want := func(when string, f Fate) {
		t.Helper()
		if f.Held != 1 || f.MovedTo["node2"] != 1 || f.HeldWaitMax != 40*time.Second ||
			!f.Opened.Equal(at(1)) || !f.Verdict.Equal(at(3)) || !f.LastSent.Equal(at(0.5)) || !f.Ended.Equal(at(45)) {
			t.Errorf("%s: fate %+v; want the outage's: held 1 (40s), moved 1, opened 1 s, verdict 3 s, last sent 0.5 s, ended 45 s", when, f)
		}
	}
	f, _ := o.Snapshot()
	want("after the outage", f)

	o.Open(at(50)) // false: the restarted engine ramping
	o.Note(func(f *Fate) { f.MovedTo["node2"]++ })
	f, _ = o.Snapshot()
	want("during a false suspicion after it", f)
	o.CloseFalse()
	f, _ = o.Snapshot()
	want("after a false suspicion after it", f)

	// The next hang: its window is the fate from its verdict on.
	o.Open(at(100))
	o.Begin(at(102), at(100.2))
	f, _ = o.Snapshot()
	if f.Held != 0 || !f.Opened.Equal(at(100)) || !f.Verdict.Equal(at(102)) {
		t.Errorf("the next outage: fate %+v; want its own, opened at 100 s, verdict 102 s", f)
	}
}
