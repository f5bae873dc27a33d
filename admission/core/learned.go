package core

import (
	"maps"
	"slices"
	"time"
)

// LearnedMaxAge is how old what the limiter learned may be and still be
// trusted after vigil's restart (an upgrade, a config change, a crash:
// minutes). Older, the engine may have been redeployed, resized or given
// another model, and the clients' timeouts changed with their release:
// the limiter starts as if it had never seen them, as it always did. An
// hour covers a restart and a rollback of vigil itself; an operator who
// changes the engine restarts it too, which the limiter relearns anyway
// (SlowStart).
const LearnedMaxAge = time.Hour

// Learned is what the limiter learned of its engine and its clients that
// is worth keeping across vigil's own restart (issue 41): the automatic
// cap where it found the engine's capacity, the engine's pace, and per
// route its clients' timeouts and patience. It is plain data, for the
// transport to persist (package state); Restore takes it back.
type Learned struct {
	// At is when it was taken.
	At time.Time `json:"at"`
	// Cap is the automatic cap once it has found the engine (past its
	// first congestion); 0: not found yet, nothing to keep.
	Cap int `json:"cap,omitempty"`
	// Seats is the engine's own seat limit (SetEngineSeats); 0: unknown.
	Seats int `json:"seats,omitempty"`
	// EngineTTFT and EngineService are the engine's pace: the streams'
	// typical time to first token and the plain answers' service time.
	// PrefillTurn is its prefill time one stream at a time (ttft_target:
	// auto derives the objective from it).
	EngineTTFT    time.Duration `json:"engine_ttft,omitempty"`
	EngineService time.Duration `json:"engine_service,omitempty"`
	PrefillTurn   time.Duration `json:"prefill_turn,omitempty"`
	// Routes: per route, its clients' give-ups (the learned timeout is
	// their median) and whether they come back for streams turned away.
	Routes map[string]LearnedRoute `json:"routes,omitempty"`
}

// LearnedRoute is what was learned of one route's clients.
type LearnedRoute struct {
	GiveUps []time.Duration `json:"give_ups,omitempty"`
	Patient bool            `json:"patient,omitempty"`
}

// Empty reports whether there is nothing worth keeping.
func (k Learned) Empty() bool {
	return k.Cap == 0 && k.Seats == 0 && k.EngineTTFT == 0 && k.EngineService == 0 &&
		k.PrefillTurn == 0 && len(k.Routes) == 0
}

// Unchanged reports whether k holds what b holds, but for when each was
// taken (At): nothing new to keep. A field added to Learned is compared
// here.
func (k Learned) Unchanged(b Learned) bool {
	if len(k.Routes) != len(b.Routes) {
		return false
	}
	for r, x := range k.Routes {
		y, ok := b.Routes[r]
		if !ok || x.Patient != y.Patient || !slices.Equal(x.GiveUps, y.GiveUps) {
			return false
		}
	}
	return k.Cap == b.Cap && k.Seats == b.Seats && k.EngineTTFT == b.EngineTTFT &&
		k.EngineService == b.EngineService && k.PrefillTurn == b.PrefillTurn
}

// Learned takes what the limiter learned so far.
func (l *Limiter) Learned() Learned {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := Learned{At: l.clock.Now(), EngineTTFT: l.engineTTFT, EngineService: l.engineService}
	if a, ok := l.auto.(*autoLimit); ok {
		if !a.probing {
			k.Cap = a.cap()
		}
		k.Seats = a.start.seats
		k.PrefillTurn = time.Duration(a.gate.turn * float64(time.Second))
	}
	for route, g := range l.deadlines.learned {
		if g.n == 0 {
			continue
		}
		r := k.routeOf(route)
		r.GiveUps = g.ordered()
		k.Routes[route] = r
	}
	for route, c := range l.deadlines.returns {
		if c.patient {
			r := k.routeOf(route)
			r.Patient = true
			k.Routes[route] = r
		}
	}
	return k
}

func (k *Learned) routeOf(route string) LearnedRoute {
	if k.Routes == nil {
		k.Routes = map[string]LearnedRoute{}
	}
	return k.Routes[route]
}

// Restore takes back what an earlier run learned, unless it is older
// than LearnedMaxAge (or from the future: a clock that jumped) or the
// limiter has learned something of its own already; it reports whether
// it did. The automatic cap starts where the engine was found, past its
// probing: that run already probed, and probing again from there would
// overshoot it by half before coming back.
func (l *Limiter) Restore(k Learned) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	age := now.Sub(k.At)
	if k.Empty() || age > LearnedMaxAge || age < -time.Minute {
		return false
	}
	if l.engineTTFT == 0 {
		l.engineTTFT = k.EngineTTFT
	}
	if l.engineService == 0 {
		l.engineService = k.EngineService
	}
	if a, ok := l.auto.(*autoLimit); ok {
		a.restore(k, now)
	}
	for route, r := range k.Routes {
		if len(r.GiveUps) > 0 && l.deadlines.learned[route] == nil && len(l.deadlines.learned) < maxLearnedRoutes {
			g := newGiveUps()
			for _, d := range r.GiveUps[max(0, len(r.GiveUps)-giveUpSamples):] {
				g.add(d)
			}
			l.deadlines.learned[route] = g
		}
		if r.Patient {
			if c := l.deadlines.comebacksOf(route); c != nil && c.turned == 0 && c.back == 0 {
				// As a route that just turned patient: half come back.
				c.patient, c.turned, c.back = true, 2*comebackWeight, comebackWeight
			}
		}
	}
	l.log.WithField("age_seconds", int(age.Seconds())).WithField("cap", l.capLocked(now)).
		WithField("routes", slices.Sorted(maps.Keys(k.Routes))).
		Info("admission: restored what the limiter learned before vigil's restart")
	l.dispatchLocked(now)
	return true
}

// restore starts the automatic cap from what an earlier run learned, if
// it has not left its start yet.
func (a *autoLimit) restore(k Learned, now time.Time) {
	if k.Seats > 0 && a.start.seats == 0 {
		a.start.seats = k.Seats
	}
	if a.gate.turn == 0 && k.PrefillTurn > 0 {
		a.gate.turn = k.PrefillTurn.Seconds()
	}
	if k.Cap > 0 && a.probing {
		a.limit = float64(max(autoMin, min(autoMax, k.Cap)))
		a.probing = false
		a.lastChange, a.winStart = now, now
	}
	a.limit = a.start.bound(a.limit)
}
