package llamacpp_test

import (
	"testing"
	"time"
)

// Through the limiter with its automatic cap, 16 clients on 2 slots: the
// cap settles at the slots (the most the engine runs without queueing,
// read from llama.cpp's own queue gauges through its profile), and the
// backlog waits in the limiter, where it can be shed, not in the engine.
func TestTheAutomaticCapSettlesAtTheSlots(t *testing.T) {
	_, eng := startEngine(t)
	v := startVigil(t, config{engine: eng.URL(), admission: true})
	m := v.watch(t)
	m.waitState(t, "healthy", 10*time.Second)

	l := startLoad(t, v.admissionURL, 16, 24)
	time.Sleep(6 * time.Second) // the cap finds the engine's batch
	var caps, deferred []float64
	for range 16 {
		s, err := v.status()
		if err != nil || s.Limiter == nil {
			t.Fatalf("/status: %v, limiter %v", err, s.Limiter)
		}
		if !s.Limiter.Automatic {
			t.Fatalf("the cap is not automatic: %+v", *s.Limiter)
		}
		caps = append(caps, float64(s.Limiter.Cap))
		deferred = append(deferred, scrape(t, eng.URL(), "llamacpp:requests_deferred"))
		time.Sleep(250 * time.Millisecond)
	}
	l.stop()
	ok, failed := l.counts()
	meanCap, meanDeferred := mean(caps), mean(deferred)
	t.Logf("cap %.1f on average %v; engine queue %.1f on average; %d calls, %d failed", meanCap, caps, meanDeferred, ok, len(failed))
	if meanCap < slots || meanCap > slots+1 {
		t.Errorf("the automatic cap averaged %.1f, want it at the engine's %d slots", meanCap, slots)
	}
	// Without the limiter the engine would hold 14 of the 16 in its queue.
	if meanDeferred > 2 {
		t.Errorf("the engine's own queue averaged %.1f: the backlog is not in the limiter", meanDeferred)
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
