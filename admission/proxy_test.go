package admission

import (
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestServiceTimeStartsOnceTheBodyIsIn: a client that sends its body
// slowly holds no slot while it does (the body is read before admission),
// and the time it took is no part of the service time the knee learns:
// 300 ms of dribbled body on an engine that answers at once must leave a
// baseline of milliseconds, not of the client's pace.
func TestServiceTimeStartsOnceTheBodyIsIn(t *testing.T) {
	eng := newFakeEngine(t, okJSON)
	cfg := testConfig()
	cfg.MaxInFlight = 0
	p := startProxy(t, cfg, eng.srv.URL)
	c := newClient(t)
	const body = `{"model":"m","prompt":"x","max_tokens":1}`
	var wg sync.WaitGroup
	for range serviceSamples {
		wg.Go(func() {
			if a := callSlowBody(c, p.url, body, 3, 100*time.Millisecond); a.err != nil || a.status != http.StatusOK {
				t.Errorf("slow-bodied call: status %d, err %v", a.status, a.err)
			}
		})
	}
	wg.Wait()
	if base := p.l.core.Stats().ServiceBaseline.Seconds(); base == 0 || base > 0.1 {
		t.Errorf("service-time baseline %.3f s after %d calls whose bodies took 300 ms, want under 0.1 s (and learned)",
			base, serviceSamples)
	}
}
