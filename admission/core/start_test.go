package core

import (
	"testing"
	"time"
)

// Issue 41: the automatic cap started at 16 and grew by a quarter a window,
// taking about 3.4 s to reach an engine that runs 61 while a burst came in
// at twice that. Windows in which the engine ran everything it was sent,
// with nothing waiting, now double it: each reading of the engine's gauges
// is counted until the cap reaches the engine.
func TestTheCapReachesTheEngineInAFewReadings(t *testing.T) {
	for _, tc := range []struct {
		name        string
		batch       int
		maxReadings int
	}{
		// 16, 32, 64 (the queue then brings it to 61); x1.25 took 6.
		{"an engine that runs 61", 61, 3},
		{"an engine that runs 200", 200, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Unix(1000, 0)
			a := newAutoLimit(0, 0, t0)
			at, readings := t0, 0
			for a.cap() < tc.batch*9/10 && readings < 50 {
				// One reading of the engine's gauges (every 250 ms), then
				// the answers that close its window.
				n := a.cap()
				a.markDemand()
				a.start.pressed = true // a request queued past the cap
				at = at.Add(10 * time.Millisecond)
				a.observeEngine(float64(max(0, n-tc.batch)), float64(min(n, tc.batch)), at)
				readings++
				for range windowMinSamples {
					at = at.Add(24 * time.Millisecond)
					a.observeDone(at.Add(-20*time.Millisecond), at, 0, false, min(n, tc.batch), 10)
				}
			}
			if readings > tc.maxReadings {
				t.Errorf("the cap reached %d of the engine's %d after %d readings of its gauges, want at most %d",
					a.cap(), tc.batch, readings, tc.maxReadings)
			}
		})
	}
}

// The seat limit an engine exposes (llama.cpp's /slots) is the cap's start
// while it probes, and its ceiling whatever the evidence: on a real
// llama-server with 2 slots the cap sawed between 3 and 6 (issue 38).
func TestTheEnginesSeatsStartAndBoundTheCap(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name  string
		limit float64 // the cap before the seats are told
		probe bool
		seats int
		want  int
	}{
		{"probing from 16, 2 slots: the cap is 2", autoInitial, true, 2, 2},
		{"probing from 16, 61 slots: the cap starts at 61", autoInitial, true, 61, 61},
		{"settled at 40, 61 slots: the cap stays", 40, false, 61, 40},
		{"settled at 40, 8 slots: the cap comes down to them", 40, false, 8, 8},
		{"one slot: the engine's word over the floor of 2", autoInitial, true, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAutoLimit(0, 0, t0)
			a.limit, a.probing = tc.limit, tc.probe
			a.OnSeats(tc.seats, t0)
			if a.cap() != tc.want {
				t.Errorf("cap %d, want %d", a.cap(), tc.want)
			}
		})
	}
	t.Run("endless headroom grows the cap to the slots, no further", func(t *testing.T) {
		a := newAutoLimit(0, 0, t0)
		a.OnSeats(2, t0)
		at := t0
		for range 100 {
			a.markDemand()
			for range windowMinSamples {
				at = at.Add(25 * time.Millisecond)
				a.observeDone(at.Add(-20*time.Millisecond), at, 0, false, 2, 10)
			}
			a.observeEngine(0, 1, at) // a slot between two requests reads idle
		}
		if a.cap() != 2 {
			t.Errorf("cap %d on an engine with 2 slots, want 2", a.cap())
		}
	})
	t.Run("an engine restart keeps the bound until the seats are read again", func(t *testing.T) {
		a := newAutoLimit(0, 0, t0)
		a.OnSeats(4, t0)
		a.Restart(t0.Add(time.Minute))
		if a.cap() != 4 {
			t.Errorf("cap %d after a restart, want the 4 slots", a.cap())
		}
	})
}

// Filling the cap is not enough to double it: 16 clients fill a cap of
// 16 and need no more (doubled, the cap then met the next phase's burst
// at 32 and its knee cut it to 4-14: admission's tiny-calls test).
func TestOnlyRequestsQueuedPastTheCapDoubleIt(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, pressed := range []bool{false, true} {
		a := newAutoLimit(0, 0, t0)
		a.markDemand()
		a.start.pressed = pressed
		at := t0.Add(10 * time.Millisecond)
		a.observeEngine(0, 16, at)
		for range windowMinSamples {
			at = at.Add(24 * time.Millisecond)
			a.observeDone(at.Add(-20*time.Millisecond), at, 0, false, 16, 1)
		}
		want := 20
		if pressed {
			want = 32
		}
		if a.cap() != want {
			t.Errorf("queued past the cap %v: cap %d, want %d", pressed, a.cap(), want)
		}
	}
}

func TestAFixedCapIgnoresTheEnginesSeats(t *testing.T) {
	l := New(testConfig()) // max_in_flight 4
	l.SetEngineSeats(2)
	if s := l.Stats(); s.Cap != 4 {
		t.Errorf("fixed cap %d after the engine told 2 seats, want the operator's 4", s.Cap)
	}
	l.SetMaxInFlight(0)
	if s := l.Stats(); s.Cap != 2 {
		t.Errorf("automatic cap %d on an engine with 2 seats, want 2", s.Cap)
	}
}

// Over streams the doubling does not apply: their first tokens judge each
// growth a prefill later, and doubled the cap ran past what fast engines
// prefill in time (the goodput family's fast10 and fast20).
func TestOverStreamsTheCapStillGrowsByAQuarter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := newAutoLimit(time.Second, 0, t0)
	a.markDemand()
	at := t0
	for i := range windowMinSamples {
		at = at.Add(15 * time.Millisecond)
		a.observeTTFT(at, 100*time.Millisecond, at)
		if i%5 == 4 {
			a.observeEngine(0, 16, at)
		}
	}
	if a.cap() != 20 {
		t.Errorf("cap %d after a window of streams with the engine running all 16, want 20", a.cap())
	}
}

// The seats the operator configured (engine_max_seqs, vLLM's
// max_num_seqs) start the cap, and bound its doubling: beside the AI
// SDK's burst at twice what 64 seats serve, the cap started at 16 and
// took 3 s to reach them, then doubled from 64 to 128 on an engine
// running all 64 with nothing waiting yet, and 64 calls waited out a
// whole answer in the engine's queue, many past their clients' timeout
// (bench/README.md, issue 41).
func TestConfiguredSeatsStartTheCapAndBoundItsDoubling(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// window: the engine's gauges read running, nothing waiting, while
	// requests queue past the cap; answers close the window.
	window := func(a *autoLimit, at time.Time, running float64) time.Time {
		a.markDemand()
		a.start.pressed = true
		at = at.Add(10 * time.Millisecond)
		a.observeEngine(0, running, at)
		for range windowMinSamples {
			at = at.Add(24 * time.Millisecond)
			a.observeDone(at.Add(-20*time.Millisecond), at, 0, false, int(running), 10)
		}
		return at
	}
	t.Run("the cap starts at the seats, and again after the engine's restart", func(t *testing.T) {
		a := newAutoLimit(0, 64, t0)
		if a.cap() != 64 {
			t.Errorf("cap %d with engine_max_seqs 64, want 64", a.cap())
		}
		a.Restart(t0.Add(time.Minute))
		if a.cap() != 64 {
			t.Errorf("cap %d after the engine's restart, want 64", a.cap())
		}
		if b := newAutoLimit(0, 0, t0); b.cap() != autoInitial {
			t.Errorf("cap %d without seats, want %d", b.cap(), autoInitial)
		}
	})
	t.Run("a data-parallel engine of 2 x 64 seats: the cap gets past the 64 told and finds its 128", func(t *testing.T) {
		a := newAutoLimit(0, 64, t0)
		at := t0
		for range 8 {
			at = window(a, at, min(float64(a.cap()), 128))
		}
		if a.cap() < 120 {
			t.Errorf("cap %d after 8 windows of an engine running all it got up to 128, want near 128", a.cap())
		}
	})
	for _, tc := range []struct {
		name           string
		seats          int
		limit, running float64
		want           int
	}{
		{"at the seats, all running, nothing waiting: one more, not double", 64, 64, 64, 65},
		{"at the seats, a batch between turnovers: a sixteenth past them at most", 64, 64, 56, 68},
		{"under the seats: doubled up to them, not past", 64, 40, 40, 64},
		{"far under the seats: doubled", 64, 16, 16, 32},
		{"more running than the seats (data-parallel ranks): they say nothing, doubled", 64, 80, 80, 160},
		{"no seats told: doubled", 0, 64, 64, 128},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAutoLimit(0, tc.seats, t0)
			a.limit = tc.limit
			window(a, t0, tc.running)
			if a.cap() != tc.want {
				t.Errorf("cap %d from %v with %v running of %d seats, want %d", a.cap(), tc.limit, tc.running, tc.seats, tc.want)
			}
		})
	}
}
