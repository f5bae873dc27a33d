package llamacpp_test

import (
	"slices"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testinfra"
)

// Through the limiter with its automatic cap, 16 clients on 2 slots: the
// cap settles at the slots (the most the engine runs without queueing,
// read from llama.cpp's own queue gauges through its profile), and the
// backlog waits in the limiter, where it can be shed, not in the engine.
func TestTheAutomaticCapSettlesAtTheSlots(t *testing.T) {
	testinfra.Alone(t) // a real engine on the shared cores: after the parallel suite
	_, eng := startEngine(t)
	v := startVigil(t, config{engine: eng.URL(), admission: true})
	m := v.watch(t)
	m.waitState(t, "healthy", 10*time.Second)

	l := startLoad(t, v.admissionURL, 16, 24)
	// The cap comes to the slots once the limiter has read them (its
	// first read of the engine's /metrics under load tells the kind).
	testinfra.WaitFor(t, 20*time.Second, "the automatic cap down near the slots", func() bool {
		s, err := v.status()
		return err == nil && s.Limiter != nil && s.Limiter.Cap <= slots+1
	})
	var caps, deferred []float64
	for range 24 {
		s, err := v.status()
		if err != nil || s.Limiter == nil {
			t.Fatalf("/status: %v, limiter %v", err, s.Limiter)
		}
		if !s.Limiter.Automatic {
			t.Fatalf("the cap is not automatic: %+v", *s.Limiter)
		}
		caps = append(caps, float64(s.Limiter.Cap))
		if d, err := scrape(eng.URL(), "llamacpp:requests_deferred"); err == nil {
			deferred = append(deferred, d)
		} else {
			t.Logf("scrape: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	l.Stop()
	if len(deferred) < len(caps)/2 {
		t.Fatalf("read the engine's queue %d times of %d", len(deferred), len(caps))
	}
	ok, failed := l.Counts()
	medCap, meanDeferred := median(caps), mean(deferred)
	t.Logf("cap %v (median %.0f); engine queue %.1f on average; %d calls, %d failed", caps, medCap, meanDeferred, ok, len(failed))
	// The cap takes the slots llama.cpp exposes (/slots) as its start and
	// its ceiling: before it read them it sawed between the slots + 1 and
	// three times the slots every read (issue 38).
	if medCap < slots || medCap > slots+1 {
		t.Errorf("the automatic cap's median was %.0f, want it within %d..%d (the slots, or one more)", medCap, slots, slots+1)
	}
	if high := slices.Max(caps); high > slots+1 {
		t.Errorf("the automatic cap rose to %.0f on an engine with %d slots: %v", high, slots, caps)
	}
	// Without the limiter the engine would hold 14 of the 16 in its queue.
	if meanDeferred > (16-slots)/3 {
		t.Errorf("the engine's own queue averaged %.1f of the %d the clients would put there: the backlog is not in the limiter", meanDeferred, 16-slots)
	}
	if len(failed) > 0 {
		t.Errorf("%d calls failed through the limiter: %v", len(failed), failed[:min(len(failed), 5)])
	}
}

func mean(xs []float64) float64 {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
