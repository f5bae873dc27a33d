package core

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// stepEngine is an engine by its step time at n in flight: every request
// in flight advances one decode step a step, so an answer of size steps
// takes size x step(n). Its throughput is n/step(n) work a second.
type stepEngine func(n int) time.Duration

// decodeBound: a step of 10 ms plus 0.4 ms a sequence (enginesim's
// decode-bound model): throughput grows with the batch to the last seat,
// by 5% from 160 to 250.
func decodeBound(n int) time.Duration {
	return 10*time.Millisecond + time.Duration(n)*400*time.Microsecond
}

// preempting: decode-bound up to a KV cache for 64, past which the
// engine preempts and recomputes: throughput falls as 64/n of its best.
func preempting(n int) time.Duration {
	if n <= 64 {
		return decodeBound(n)
	}
	return time.Duration(float64(decodeBound(64)) * float64(n) * float64(n) / (64 * 64))
}

// flatPast48: throughput stops growing at 48 in flight (a step grows in
// proportion to the batch past it).
func flatPast48(n int) time.Duration {
	if n <= 48 {
		return decodeBound(n)
	}
	return time.Duration(float64(decodeBound(48)) * float64(n) / 48)
}

// TestTheThroughputKneeFindsWhereMoreStreamsCompleteNoMore feeds the knee
// answers as the cap climbs a level of in flight at a time to the seats
// (256), 60 answers a level, then 400 more there, each answer's service
// time jittered by up to +-noise: it must set a ceiling where throughput
// stops growing, and none on an engine whose throughput grows to its
// seats. A flat throughput under noisy answers takes more of them.
func TestTheThroughputKneeFindsWhereMoreStreamsCompleteNoMore(t *testing.T) {
	for _, tc := range []struct {
		name           string
		engine         stepEngine
		noise          float64
		wantLo, wantHi float64 // the ceiling; 0, 0: none
	}{
		{"decode-bound: throughput grows to the seats, no ceiling", decodeBound, 0, 0, 0},
		{"decode-bound with answers 20% apart: no ceiling", decodeBound, 0.2, 0, 0},
		{"preempting past a KV cache for 64: back to about 64", preempting, 0, 40, 80},
		{"preempting, answers 20% apart: back to about 64", preempting, 0.2, 40, 80},
		{"flat past 48: back to about 48", flatPast48, 0, 30, 64},
		{"flat past 48, answers 20% apart: back from the seats", flatPast48, 0.2, 30, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			var k throughputKnee
			now := time.Unix(1000, 0)
			ceiling := 0.0
			for n := 8.0; ceiling == 0; n = min(autoMax, n*kneeLevel) {
				if n == autoMax && k.answers > 1000 {
					break
				}
				for range 60 {
					now = now.Add(100 * time.Millisecond)
					size := 100 + rng.IntN(200)
					svc := time.Duration(float64(size) * float64(tc.engine(int(n))) * (1 + tc.noise*(2*rng.Float64()-1)))
					if c := k.observe(svc, int(n), size, now); c > 0 {
						ceiling = c
						break
					}
				}
			}
			if ceiling < tc.wantLo || ceiling > tc.wantHi || (tc.wantHi == 0) != (ceiling == 0) {
				t.Fatalf("ceiling %.1f, want within [%.0f, %.0f] (0: none)", ceiling, tc.wantLo, tc.wantHi)
			}
			if ceiling == 0 {
				return
			}
			// The ceiling holds kneeHoldTurns service times (30 s at least),
			// then lifts so that the cap is judged past it again.
			if got := k.bound(now.Add(kneeHoldMin - time.Second)); got != ceiling {
				t.Errorf("bound %.1f just before the hold ends, want the ceiling %.1f", got, ceiling)
			}
			if got := k.bound(now.Add(time.Hour)); got != 0 {
				t.Errorf("bound %.1f an hour later, want none", got)
			}
		})
	}
}

// driveSteps runs the automatic cap over streams on e for d, demand always
// over the cap: every 10 ms the answers the cap completes in 10 ms finish
// (size 300), with a first token each within the objective, and every
// 250 ms one scrape of an engine that queues nothing. It returns the cap
// every second.
func driveSteps(a *autoLimit, e stepEngine, d time.Duration) []int {
	now := time.Unix(1000, 0)
	var caps []int
	due := 0.0
	const size = 300
	for i := 0; time.Duration(i)*10*time.Millisecond < d; i++ {
		now = now.Add(10 * time.Millisecond)
		n := a.cap()
		a.markDemand()
		s := time.Duration(size) * e(n)
		due += float64(n) * 0.01 / s.Seconds()
		for ; due >= 1; due-- {
			a.observeTTFT(now.Add(-s), 20*time.Millisecond, now)
			a.observeDone(now.Add(-s), now, 0, true, n, size)
		}
		if i%25 == 0 {
			a.observeEngine(0, float64(n), now)
		}
		if i%100 == 0 {
			caps = append(caps, a.cap())
		}
	}
	return caps
}

// TestTheCapBacksOffWhereMoreStreamsCompleteNoMore (#43): streams whose
// first tokens stay within the objective are not held to the service
// time's knee, and on an engine whose throughput falls past its KV cache
// nothing stopped the cap short of the seats (on the law before the
// throughput knee: 256 here). With it the cap backs off to where the
// engine completed most, while a decode-bound engine still fills its
// seats.
func TestTheCapBacksOffWhereMoreStreamsCompleteNoMore(t *testing.T) {
	for _, tc := range []struct {
		name           string
		engine         stepEngine
		wantLo, wantHi int
	}{
		{"decode-bound fills its seats", decodeBound, 217, autoMax},
		{"preempting past 64 stays near 64", preempting, 32, 115},
		{"flat past 48 stays near 48", flatPast48, 24, 90},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAutoLimit(autoObjective, 0, time.Unix(1000, 0))
			a.probing = false
			caps := driveSteps(a, tc.engine, 20*time.Minute)
			last := caps[len(caps)-300:] // the last 5 minutes
			if lo, hi := slices.Min(last), slices.Max(last); lo < tc.wantLo || hi > tc.wantHi {
				t.Errorf("cap %d..%d over the last 5 minutes, want within [%d, %d]", lo, hi, tc.wantLo, tc.wantHi)
			}
		})
	}
}
