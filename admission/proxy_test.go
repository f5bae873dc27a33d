package admission

import (
	"net/http"
	"sync"
	"testing"
	"time"
)

func TestMeterCountsEventsAndReadsUsage(t *testing.T) {
	stream := "data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2,\"total_tokens\":9}}\n\ndata: [DONE]\n\n"
	t0 := time.Unix(1000, 0)
	for _, split := range []int{1, 3, 7, len(stream)} {
		m := meter{sse: true}
		for i := 0; i < len(stream); i += split {
			m.chunk([]byte(stream[i:min(len(stream), i+split)]), t0.Add(time.Duration(i)*time.Millisecond))
		}
		if m.events != 4 {
			t.Errorf("split %d: %d events, want 4", split, m.events)
		}
		if c, tot := m.tokens(100); c != 2 || tot != 9 {
			t.Errorf("split %d: tokens %d/%d, want 2/9 from usage", split, c, tot)
		}
	}
	noUsage := meter{sse: true}
	noUsage.chunk([]byte("data: {}\n\ndata: {}\n\ndata: [DONE]\n\n"), t0)
	if c, tot := noUsage.tokens(10); c != 2 || tot != 12 {
		t.Errorf("stream without usage: tokens %d/%d, want 2/12 counted from events", c, tot)
	}
	m := meter{}
	m.chunk([]byte(`{"id":"x","usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`), t0)
	if c, tot := m.tokens(100); c != 4 || tot != 7 {
		t.Errorf("unary tokens %d/%d, want 4/7", c, tot)
	}
}

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
