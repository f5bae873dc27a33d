package engineloss

import (
	"testing"
	"time"
)

// Suspicions raised and cleared every few seconds are one episode: one
// line begins it; a suspicion after a minute's calm begins the next, and
// the one before is summed up then.
func TestSuspicionsGroupIntoEpisodes(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	var e Episodes
	begins := 0
	for i := range 200 { // every 5 s for 1,000 s: a flapping misjudgement
		b, ended := e.Raised(at(time.Duration(i)*5*time.Second), Evidence{InFlight: i})
		if b {
			begins++
		}
		if ended != nil {
			t.Fatalf("an episode ended at raise %d: %+v", i, ended)
		}
		e.Cleared(at(time.Duration(i)*5*time.Second + time.Second))
	}
	if begins != 1 || e.Evidence.InFlight != 0 {
		t.Fatalf("%d episodes begun (evidence %+v), want 1 with its first suspicion's evidence", begins, e.Evidence)
	}
	b, ended := e.Raised(at(2000*time.Second), Evidence{InFlight: 7})
	if !b || ended == nil || ended.Raised != 200 || ended.End != at(996*time.Second) {
		t.Fatalf("begins %v, ended %+v; want a new episode and the last one's 200 suspicions to 996 s", b, ended)
	}
	e.Confirmed()
	if b, ended := e.Raised(at(2001*time.Second), Evidence{}); !b || ended != nil {
		t.Fatalf("after a verdict: begins %v, ended %+v; want a new episode, nothing to sum up", b, ended)
	}
}
